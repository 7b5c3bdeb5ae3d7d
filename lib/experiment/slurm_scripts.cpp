#include "experiment/slurm_scripts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "experiment/stage_process.h"
#include "io/atomic_file.h"
#include "io/error.h"

namespace rqat::experiment {

namespace fs = std::filesystem;

std::string shell_quote(std::string_view value) {
  std::string quoted = "'";
  for (char c : value) {
    // Inside single quotes nothing is special except the closing quote: end the quoted part,
    // write an escaped quote, start a new quoted part.
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

namespace {

// The instances of one stage of the file: one batch script.
struct StageGroup {
  std::string stage;
  std::vector<const StageInstance*> instances;
  std::vector<std::string> after;  // stage names, in first-appearance order
};

std::string where(const StageInstance& instance) {
  return fmt::format("{}: stage '{}'", instance.location.to_string(), instance.stage);
}

// Text for a comment line: a newline in a value would end the comment and start a command.
std::string comment_safe(std::string_view text) {
  std::string safe(text);
  for (char& c : safe)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return safe;
}

// sbatch reads #SBATCH lines itself: whitespace splits a value into further options, quotes and
// backslashes change how it is split, '#' starts a comment, and control characters end the line.
// Plain printable ASCII without those is passed through as written.
void check_directive_value(const StageInstance& instance, const std::string& field,
                           const std::string& value, std::string_view also_forbidden = "") {
  for (char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    const bool printable = byte > 0x20 && byte < 0x7f;
    if (!printable || std::string_view("'\"\\#").find(c) != std::string_view::npos ||
        also_forbidden.find(c) != std::string_view::npos) {
      fail("{}: SLURM {} '{}' contains {} which cannot go into an #SBATCH line", where(instance),
           field, comment_safe(value),
           c == ' '    ? std::string("a space")
           : printable ? fmt::format("'{}'", c)
                       : fmt::format("byte 0x{:02x}", byte));
    }
  }
}

// One array job has one resource request, so every instance of a stage must ask for the same.
void check_same_resources(const StageGroup& group) {
  const StageInstance& first = *group.instances.front();
  for (const StageInstance* other : group.instances) {
    for (const auto& field : slurm_resource_fields()) {
      const std::string expected = field.value_text(first.resources);
      const std::string got = field.value_text(other->resources);
      if (got == expected) continue;
      fail(
          "{}: instances '{}' and '{}' ask for different SLURM {} ('{}' vs '{}'); one job array "
          "has one resource request, so give them separate stages",
          where(first), first.id, other->id, field.name, comment_safe(expected), comment_safe(got));
    }
  }
}

void check_stage_name(const StageInstance& instance) {
  const std::string& name = instance.stage;
  bool ok = !name.empty() && name.front() != '.' && name.front() != '-';
  for (char c : name)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  if (!ok) {
    fail("{}: the stage name is used as a script and job name; use letters, digits, '.', '_', '-'",
         where(instance));
  }
}

std::vector<StageGroup> group_by_stage(const ExperimentPlan& plan) {
  if (plan.stages.empty()) fail("{}: the experiment has no stages", plan.experiment_file.string());
  std::vector<StageGroup> groups;
  std::map<std::string, size_t> index;
  for (const auto& instance : plan.stages) {
    auto [it, added] = index.emplace(instance.stage, groups.size());
    if (added) groups.push_back({instance.stage, {}, {}});
    groups[it->second].instances.push_back(&instance);
  }
  for (auto& group : groups) {
    for (const StageInstance* instance : group.instances) {
      for (const auto& input_id : instance->inputs) {
        const StageInstance* input = plan.find(input_id);
        if (input == nullptr) fail("{}: input '{}' is not in the plan", where(*instance), input_id);
        if (input->stage == group.stage) {
          fail(
              "{}: instance '{}' needs '{}' of the same stage; SLURM dependencies are per stage "
              "(one job array), so it cannot wait for its own tasks",
              where(*instance), instance->id, input_id);
        }
        auto& after = group.after;
        if (std::find(after.begin(), after.end(), input->stage) == after.end()) {
          after.push_back(input->stage);
        }
      }
    }
  }
  return groups;
}

// Stages ordered so that each comes after the stages it needs (Kahn's algorithm, taking the
// earliest ready stage in plan order). Instance order alone is not enough: a stage's first
// instance may come before an instance of another stage that a later instance of it needs.
std::vector<StageGroup> submission_order(std::vector<StageGroup> groups) {
  std::vector<StageGroup> ordered;
  std::set<std::string> done;
  std::vector<bool> taken(groups.size(), false);
  while (ordered.size() < groups.size()) {
    bool progress = false;
    for (size_t i = 0; i < groups.size() && !progress; ++i) {
      if (taken[i]) continue;
      bool ready = true;
      for (const auto& stage : groups[i].after) ready = ready && done.count(stage) > 0;
      if (!ready) continue;
      taken[i] = true;
      done.insert(groups[i].stage);
      ordered.push_back(groups[i]);
      progress = true;
    }
    if (!progress) {
      std::vector<std::string> waiting;
      for (size_t i = 0; i < groups.size(); ++i)
        if (!taken[i]) waiting.push_back("'" + groups[i].stage + "'");
      fail(
          "{}: stages {} need instances of each other; SLURM dependencies are per stage, so "
          "these cannot be ordered",
          where(*groups.front().instances.front()), fmt::join(waiting, ", "));
    }
  }
  return ordered;
}

// Several GPUs or nodes: one task per GPU (one per node without GPUs) started by srun, the
// layout lib/train/distributed.cpp reads from SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and the
// node list (it derives the rendezvous address and port from them, so none are set here).
bool uses_srun(const SlurmResources& r) { return r.nodes > 1 || r.gpus > 1; }

int tasks_per_node(const SlurmResources& r) { return r.gpus > 1 ? r.gpus : 1; }

std::string render_command(const StageInstance& instance, const SlurmOptions& options,
                           const std::string& indent) {
  const SlurmResources& r = instance.resources;
  // With a preemption signal the shell stays: it runs the tool in the background, hands SLURM's
  // SIGUSR1 (sent to the batch shell only, B:) on to it, waits for it, and requeues the job when
  // the tool stopped on it with a checkpoint (exit 138). Else the tool replaces the shell.
  const bool watch = r.signal_seconds > 0;
  std::string launch = watch ? "" : "exec ";
  if (uses_srun(r)) {
    // --kill-on-bad-exit: a rank that dies stops the others now, not at the collective timeout.
    // --cpus-per-task again: srun of Slurm 22.05+ does not inherit it from the batch job.
    launch += "srun --kill-on-bad-exit=1 ";
    if (r.cpus > 0) launch += fmt::format("--cpus-per-task={} ", r.cpus);
  }
  std::string text;
  text +=
      indent + "printf '%s\\n' " + shell_quote("rqat sbatch: instance " + instance.id) + " >&2\n";
  text += indent + "mkdir -p " + shell_quote(instance.out_dir.string()) + "\n";
  const bool resume = takes_resume(instance);
  if (resume) {
    // A requeued or resubmitted job continues from the stage's last checkpoint.
    text += indent + "resume=()\n";
    text += indent + "if [ -e " +
            shell_quote((instance.out_dir / "checkpoints" / "latest").string()) +
            " ]; then resume=(--resume); fi\n";
  }
  if (watch) {
    text += indent + "child=\n";
    text += indent + "trap '[ -z \"$child\" ] || kill -USR1 \"$child\" 2>/dev/null' USR1\n";
  }
  text += indent + launch + shell_quote((options.bin_dir / instance.program).string());
  // One flag with its values per line, for review.
  for (size_t i = 0; i < instance.argv.size(); ++i) {
    const std::string& arg = instance.argv[i];
    const bool new_line = i == 0 || (arg.size() > 1 && arg[0] == '-');
    text += new_line ? " \\\n" + indent + "    " : " ";
    text += shell_quote(arg);
  }
  if (resume) text += " \\\n" + indent + "    ${resume[@]+\"${resume[@]}\"}";
  if (!watch) return text + "\n";
  text += " &\n";
  text += indent + "child=$!\n";
  // wait returns early (128 + 10) when the trap runs; the tool is still at work then.
  text += indent + "while :; do\n";
  text += indent + "  status=0\n";
  text += indent + "  wait \"$child\" || status=$?\n";
  text += indent + "  kill -0 \"$child\" 2>/dev/null || break\n";
  text += indent + "done\n";
  if (r.requeue) {
    text += indent + "if [ \"$status\" -eq 138 ]; then\n";
    text += indent + "  printf '%s\\n' " +
            shell_quote("rqat sbatch: " + instance.id +
                        " stopped on SIGUSR1 with a checkpoint; requeueing the job") +
            " >&2\n";
    text += indent + "  scontrol requeue \"$SLURM_JOB_ID\"\n";
    text += indent + "fi\n";
  }
  return text + indent + "exit \"$status\"\n";
}

std::string render_script(const ExperimentPlan& plan, const StageGroup& group,
                          const SlurmOptions& options, const fs::path& log_dir) {
  const StageInstance& first = *group.instances.front();
  const SlurmResources& r = first.resources;
  const size_t count = group.instances.size();
  const bool array = count > 1;

  std::string text = "#!/bin/bash\n";
  text += fmt::format(
      "# rqat sbatch: stage '{}' of experiment '{}' ({}), {}\n", group.stage,
      comment_safe(plan.name), comment_safe(plan.experiment_file.string()),
      array ? fmt::format("{} instances, one per array task", count) : std::string("one instance"));
  for (size_t i = 0; i < count; ++i)
    text += fmt::format("#   {}: {}\n", i, comment_safe(group.instances[i]->id));
  if (!group.after.empty()) {
    text += fmt::format("# Runs after every job of: {} (submit.sh sets --dependency)\n",
                        fmt::join(group.after, ", "));
  }

  std::vector<std::pair<std::string, std::string>> header;
  const std::string job_name = plan.name + "-" + group.stage;
  check_directive_value(first, "job-name (experiment name + stage)", job_name);
  header.emplace_back("job-name", job_name);
  // '%' would be read as one of sbatch's file name patterns.
  const std::string log = (log_dir / (group.stage + (array ? "-%A_%a.out" : "-%j.out"))).string();
  check_directive_value(first, "output (the run directory's logs/)", log_dir.string(), "%");
  header.emplace_back("output", log);
  if (array) header.emplace_back("array", fmt::format("0-{}", count - 1));
  if (r.nodes < 1) fail("{}: SLURM nodes {} must be at least 1", where(first), r.nodes);
  if (r.gpus < 0) fail("{}: SLURM gpus {} must not be negative", where(first), r.gpus);
  if (r.cpus < 0) fail("{}: SLURM cpus {} must not be negative", where(first), r.cpus);
  header.emplace_back("nodes", std::to_string(r.nodes));
  if (uses_srun(r)) header.emplace_back("ntasks-per-node", std::to_string(tasks_per_node(r)));
  if (r.gpus > 0) header.emplace_back("gpus-per-node", std::to_string(r.gpus));
  if (r.cpus > 0) header.emplace_back("cpus-per-task", std::to_string(r.cpus));
  if (r.requeue != 0 && r.requeue != 1)
    fail("{}: SLURM requeue {} must be 0 or 1", where(first), r.requeue);
  // B: the batch shell gets the signal; the script hands it to the tool (render_command).
  if (r.signal_seconds > 0)
    header.emplace_back("signal", fmt::format("B:USR1@{}", r.signal_seconds));
  if (r.requeue) header.emplace_back("requeue", "");
  // The text fields are directives of the same name; the numbers above are not.
  for (const auto& field : slurm_resource_fields()) {
    if (!field.text || (r.*field.text).empty()) continue;
    check_directive_value(first, field.name, r.*field.text);
    header.emplace_back(field.name, r.*field.text);
  }
  for (const auto& [key, value] : header)
    text += value.empty() ? fmt::format("#SBATCH --{}\n", key)
                          : fmt::format("#SBATCH --{}={}\n", key, value);

  text += "\nset -euo pipefail\n";
  if (!plan.slurm_setup.empty()) {
    // The user's own shell lines, run as written. Without -u: module and conda scripts read
    // variables that may be unset.
    text += "# slurm.setup of the experiment file\nset +u\n";
    for (const auto& line : plan.slurm_setup) text += line + "\n";
    text += "set -u\n";
  }
  text += "cd " + shell_quote(options.work_dir.string()) + "\n\n";

  if (!array) return text + render_command(first, options, "");
  text += "case \"${SLURM_ARRAY_TASK_ID:-}\" in\n";
  for (size_t i = 0; i < count; ++i) {
    text += fmt::format("  {})\n", i);
    text += render_command(*group.instances[i], options, "    ");
    text += "    ;;\n";
  }
  text += fmt::format(
      "  *)\n    echo \"SLURM_ARRAY_TASK_ID='${{SLURM_ARRAY_TASK_ID:-}}' is not one of 0-{}\" "
      ">&2\n    exit 2\n    ;;\nesac\n",
      count - 1);
  return text;
}

// A shell variable name for a stage's job id (stage names may hold '.' and '-').
std::string job_variable(const std::string& stage, std::set<std::string>& used) {
  std::string name = "jid_";
  for (char c : stage) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  std::string unique = name;
  for (int n = 2; used.count(unique); ++n) unique = fmt::format("{}_{}", name, n);
  used.insert(unique);
  return unique;
}

std::string render_submit(const ExperimentPlan& plan, const std::vector<SlurmScript>& scripts) {
  std::string text = "#!/bin/bash\n";
  text +=
      fmt::format("# rqat sbatch: submits the {} stages of experiment '{}' in dependency order.\n",
                  scripts.size(), comment_safe(plan.name));
  text +=
      "# A stage waits (afterok) for every task of the jobs it needs; --kill-on-invalid-dep=yes\n"
      "# cancels it when one of those fails instead of leaving it pending forever.\n"
      "set -euo pipefail\n";
  std::set<fs::path> log_dirs;
  for (const auto& script : scripts)
    if (log_dirs.insert(script.log_dir).second)
      text += "mkdir -p " + shell_quote(script.log_dir.string()) + "\n";
  std::set<std::string> used;
  std::map<std::string, std::string> variable;
  for (const auto& script : scripts) {
    const std::string var = job_variable(script.stage, used);
    variable[script.stage] = var;
    std::string flags = "--parsable";
    if (!script.after.empty()) {
      flags += " --kill-on-invalid-dep=yes --dependency=\"afterok";
      for (const auto& stage : script.after) flags += ":$" + variable.at(stage);
      flags += "\"";
    }
    text += fmt::format("{}=$(sbatch {} {})\n", var, flags, shell_quote(script.file.string()));
    text += fmt::format("{0}=${{{0}%%;*}}  # --parsable prints ID or ID;CLUSTER\n", var);
    text += fmt::format("echo \"{}: job ${}\"\n", script.stage, var);
  }
  return text;
}

std::string render_listing(const ExperimentPlan& plan, const std::vector<SlurmScript>& scripts) {
  std::string text =
      fmt::format("rqat sbatch: experiment '{}' ({}), run directory {}\n", comment_safe(plan.name),
                  comment_safe(plan.experiment_file.string()), comment_safe(plan.run_dir.string()));
  text += "Stages in submission order; array task -> instance:\n";
  for (const auto& script : scripts) {
    text +=
        fmt::format("\n{} ({}), after: {}\n", script.stage, script.file.filename().string(),
                    script.after.empty() ? "-" : fmt::format("{}", fmt::join(script.after, ", ")));
    for (size_t i = 0; i < script.instance_ids.size(); ++i)
      text += fmt::format("  {}  {}\n", i, comment_safe(script.instance_ids[i]));
  }
  return text;
}

void write_executable(const fs::path& file, const std::string& text) {
  io::write_text_atomically(file, text);
  fs::permissions(file, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                  fs::perm_options::add);
}

}  // namespace

std::vector<SlurmScript> write_slurm_scripts(const ExperimentPlan& plan,
                                             const SlurmOptions& options) {
  if (!options.bin_dir.is_absolute()) {
    fail("sbatch scripts: the binary directory '{}' must be absolute", options.bin_dir.string());
  }
  if (!options.work_dir.is_absolute()) {
    fail("sbatch scripts: the working directory '{}' must be absolute", options.work_dir.string());
  }
  // Relative paths are meant from the working directory, which the scripts cd to.
  const fs::path out_dir = (options.work_dir / options.out_dir).lexically_normal();
  const fs::path log_dir = (options.work_dir / plan.run_dir / "logs").lexically_normal();

  auto groups = group_by_stage(plan);
  for (const auto& group : groups) {
    check_stage_name(*group.instances.front());
    check_same_resources(group);
    for (const StageInstance* instance : group.instances) {
      if (instance->program.empty() || instance->program.find('/') != std::string::npos) {
        fail("{}: program '{}' must be a binary name in the binary directory", where(*instance),
             comment_safe(instance->program));
      }
    }
  }
  groups = submission_order(std::move(groups));

  // Render everything before writing anything: a bad value leaves no half-written directory.
  std::vector<SlurmScript> scripts;
  std::vector<std::string> texts;
  for (const auto& group : groups) {
    SlurmScript script;
    script.stage = group.stage;
    script.file = out_dir / (group.stage + ".sbatch");
    for (const StageInstance* instance : group.instances)
      script.instance_ids.push_back(instance->id);
    script.after = group.after;
    script.log_dir = log_dir;
    texts.push_back(render_script(plan, group, options, log_dir));
    scripts.push_back(std::move(script));
  }
  fs::create_directories(out_dir);
  for (size_t i = 0; i < scripts.size(); ++i) write_executable(scripts[i].file, texts[i]);
  write_executable(out_dir / "submit.sh", render_submit(plan, scripts));
  io::write_text_atomically(out_dir / "plan.txt", render_listing(plan, scripts));
  // `rqat status RUN_DIR` and `rqat report` read the plan from the run directory.
  const fs::path run_dir = (options.work_dir / plan.run_dir).lexically_normal();
  fs::create_directories(run_dir);
  write_plan(run_dir / "plan.json", plan);
  return scripts;
}

namespace {

std::string trimmed_first_line(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  std::string line = text.substr(begin, text.find('\n', begin) - begin);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace

std::vector<std::string> submit_slurm_scripts(const std::vector<SlurmScript>& scripts) {
  std::vector<std::string> ids;
  std::map<std::string, std::string> job_of_stage;
  auto submitted = [&] {
    std::vector<std::string> parts;
    for (size_t i = 0; i < ids.size(); ++i) parts.push_back(scripts[i].stage + "=" + ids[i]);
    return parts.empty() ? std::string("none") : fmt::format("{}", fmt::join(parts, ", "));
  };
  for (const auto& script : scripts) {
    // SLURM opens the --output file when the job starts and fails the job if its directory is
    // missing.
    fs::create_directories(script.log_dir);
    std::vector<std::string> argv = {"sbatch", "--parsable"};
    if (!script.after.empty()) {
      std::string dependency = "--dependency=afterok";
      for (const auto& stage : script.after) {
        auto it = job_of_stage.find(stage);
        if (it == job_of_stage.end()) {
          fail("stage '{}' needs stage '{}', which is not submitted before it", script.stage,
               stage);
        }
        dependency += ":" + it->second;
      }
      argv.insert(argv.end(), {"--kill-on-invalid-dep=yes", dependency});
    }
    argv.push_back(script.file.string());

    const auto result = run_captured(argv);
    if (!result.started) {
      fail(
          "cannot run sbatch for {}: {} (is it on PATH? without --submit the "
          "scripts are only written); submitted so far: {}",
          script.file.string(), result.err, submitted());
    }
    if (result.exit_code != 0) {
      fail("sbatch {} exited with status {}: {}; submitted so far: {}", script.file.string(),
           result.exit_code, comment_safe(trimmed_first_line(result.err)), submitted());
    }
    // --parsable prints "ID" or "ID;CLUSTER".
    const std::string line = trimmed_first_line(result.out);
    const std::string id = line.substr(0, line.find(';'));
    if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
      fail("sbatch {} printed '{}', not a job id; submitted so far: {}", script.file.string(),
           comment_safe(line), submitted());
    }
    ids.push_back(id);
    job_of_stage[script.stage] = id;
  }
  return ids;
}

}  // namespace rqat::experiment
