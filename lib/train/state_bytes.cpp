#include "train/state_bytes.h"

#include <fmt/format.h>

namespace rqat::train {
namespace {

std::string mib(int64_t bytes) {
  return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

io::Json state_bytes_json(const StateBytes& b) {
  return {{"weights", b.weights},
          {"gradients", b.gradients},
          {"master", b.master},
          {"moments", b.moments},
          {"total", b.total()}};
}

std::string format_state_bytes(const StateBytes& b) {
  return fmt::format("weights {}, gradients {}, master weights {}, AdamW moments {}; total {}",
                     mib(b.weights), mib(b.gradients), mib(b.master), mib(b.moments),
                     mib(b.total()));
}

}  // namespace rqat::train
