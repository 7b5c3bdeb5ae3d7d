// Starting a stage tool as a child process: an argument vector (never a shell, so no value can
// inject a command), stdout and stderr appended to a log file, stdin from /dev/null, and its own
// process group so a Ctrl-C reaches the runner, which forwards it exactly once.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace rqat::experiment {

// Starts `program` with `args` (argv[0] is the program path); returns its pid.
pid_t spawn_logged(const std::filesystem::path& program, const std::vector<std::string>& args,
                   const std::filesystem::path& log_file);

// The directory of the running executable (/proc/self/exe): where the other tools are built.
std::filesystem::path current_executable_dir();

// Runs `args` (args[0] looked up on PATH when it has no '/') to completion without a shell, stdin
// from /dev/null, collecting its stdout and stderr. When it cannot be started, `started` is false
// and `err` says why.
struct CapturedRun {
  bool started = true;
  int exit_code = 0;  // as exit_code_of
  std::string out, err;
};
CapturedRun run_captured(const std::vector<std::string>& args);

// Runs `args` (args[0] looked up on PATH) without a shell, sharing this process's stdin, stdout
// and stderr, and waits; returns its exit code (as exit_code_of). Throws when it cannot start.
int run_in_foreground(const std::vector<std::string>& args);

// The exit code of a waitpid status: the code, or 128 + the signal that ended the process.
int exit_code_of(int wait_status);

// The last `lines` lines of a text file ("" when unreadable).
std::string tail_of_file(const std::filesystem::path& file, int lines);

// A command line for people to read or paste: arguments with shell metacharacters single-quoted.
std::string display_command(const std::vector<std::string>& argv);

}  // namespace rqat::experiment
