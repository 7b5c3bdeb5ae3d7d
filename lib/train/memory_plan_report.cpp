// The memory plan as text and JSON (memory_plan.h): the numbers and, per line, the formula that
// made them, so a reader can check a plan against the accounting in docs/distributed.md.
#include <fmt/format.h>

#include <utility>
#include <vector>

#include "train/memory_plan.h"

namespace rqat::train {

namespace {

struct Row {
  const char* name;
  int64_t bytes;
  std::string how;
};

std::vector<Row> rows(const MemoryPlan& p, const MemoryPlanInput& in) {
  const int64_t c = in.compute_bytes;
  const bool none = in.shard == ShardMode::kNone;
  const bool full = in.shard == ShardMode::kParameters;
  std::string weights = none   ? "N x 4 (float32; bf16 by autocast)"
                        : full ? fmt::format("(N - T_L) x {}: layers are gathered when used", c)
                               : fmt::format("N x {}", c);
  std::string gradients = none ? "T x 4"
                          : in.shard == ShardMode::kOptimizer
                              ? fmt::format("T x {} + T x 4 / W (float32 slice)", c)
                              : fmt::format("R_T x {} + T x 4 / W (layers scattered)", c);
  const int64_t cf = in.frozen_bytes > 0 ? in.frozen_bytes : c;
  std::string frozen = !in.frozen ? "none"
                       : full     ? fmt::format("(root + layers / W) x {}", cf)
                                  : fmt::format("{} parameters x {}", p.frozen.total, cf);
  std::string kv = "no rollouts";
  if (in.rollouts)
    kv = fmt::format("{} x {} sequences x {} tokens x {} layers x 2 x {} x {} x {}",
                     in.rollouts->prompts_per_rank, in.rollouts->group_size,
                     in.rollouts->sequence_tokens, in.model.num_hidden_layers,
                     in.model.num_key_value_heads, in.model.head_dim, c);
  std::string activations =
      fmt::format("{} x {} tokens, {}{}", in.micro_batch, in.sequence_length,
                  p.checkpointed ? "checkpointed (layer inputs + one layer)" : "every layer",
                  in.frozen_logits ? " + both logits" : " + logits");
  if (in.fake_quant) activations += " + fake-quantized weights";
  std::string transient = "none";
  if (full)
    transient = fmt::format("2 x L_max x {}: a gathered layer and its gradients{}", c,
                            in.frozen ? " + a frozen layer" : "");
  else if (p.transient > 0)
    transient = "T x 2: autocast's bf16 copies of the weights";
  return {{"weights", p.weights, weights},
          {"gradients", p.gradients, gradients},
          {"master", p.master, none ? "none (the weights are float32)" : "T x 4 / W"},
          {"optimizer", p.moments, none ? "T x 8 (AdamW moments)" : "T x 8 / W (AdamW moments)"},
          {"teacher/reference", p.frozen_weights, frozen},
          {"KV cache", p.kv_cache, kv},
          {"rollout weights", p.rollout_weights,
           full && in.rollouts ? fmt::format("T_L x {}: the policy gathered for rollouts", c)
                               : std::string("none")},
          {"activations", p.activations, activations},
          {"transient", p.transient, transient},
          {"total", p.total,
           "max(KV cache + rollout weights, activations + transient) + the rest"}};
}

// 8.19B, 5.9M: the sizes models are known by.
std::string count(int64_t n) {
  const auto x = static_cast<double>(n);
  if (x >= 1e9) return fmt::format("{:.2f}B", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.1f}M", x / 1e6);
  return fmt::format("{}", n);
}

io::Json counts_json(const ParameterCounts& n) {
  return {{"total", n.total},
          {"layers", n.layers},
          {"root", n.root},
          {"largest_layer", n.largest_layer}};
}

}  // namespace

std::string format_memory_plan(const MemoryPlan& p, const MemoryPlanInput& in) {
  std::string out = fmt::format(
      "memory per rank: {}, {} parameters ({} trainable), --shard {}, {} rank{}, {}\n",
      in.model.model_type, count(p.parameters.total), count(p.trainable.total), enum_name(in.shard),
      in.world_size, in.world_size == 1 ? "" : "s", in.compute_bytes == 2 ? "bf16" : "f32");
  out += fmt::format("  N {}, T {}, T_L {}, L_max {}", p.parameters.total, p.trainable.total,
                     p.trainable.layers, p.trainable.largest_layer);
  if (in.frozen) out += fmt::format("; teacher/reference {}", p.frozen.total);
  out += "\n";
  out += fmt::format("  {:<18} {:>8}  {}\n", "", "GiB", "how");
  for (const auto& row : rows(p, in))
    out += fmt::format("  {:<18} {:>8.2f}  {}\n", row.name, gib(row.bytes), row.how);
  out += fmt::format("  activations: {:.2f} GiB without checkpointing, {:.2f} GiB with{}\n",
                     gib(p.activations_full), gib(p.activations_checkpointed),
                     p.checkpointed && !in.activation_checkpointing
                         ? fmt::format(" (--shard {} always checkpoints)", enum_name(in.shard))
                         : "");
  return out;
}

io::Json memory_plan_json(const MemoryPlan& p, const MemoryPlanInput& in) {
  io::Json bytes = io::Json::object(), gibs = io::Json::object();
  for (const auto& row : rows(p, in)) {
    bytes[row.name] = row.bytes;
    gibs[row.name] = gib(row.bytes);
  }
  bytes["activations_without_checkpointing"] = p.activations_full;
  bytes["activations_with_checkpointing"] = p.activations_checkpointed;
  return {{"model_type", in.model.model_type},
          {"shard", std::string(enum_name(in.shard))},
          {"world_size", in.world_size},
          {"compute_bytes", in.compute_bytes},
          {"micro_batch", in.micro_batch},
          {"sequence_length", in.sequence_length},
          {"activation_checkpointing", p.checkpointed},
          {"parameters", counts_json(p.parameters)},
          {"trainable", counts_json(p.trainable)},
          {"frozen", counts_json(p.frozen)},
          {"bytes", bytes},
          {"gib", gibs}};
}

}  // namespace rqat::train
