// See rqat_tiny_task_config.h.
#include "cli/rqat_tiny_task_config.h"

#include <ostream>

namespace rqat::cli {

void TinyTaskConfig::run(std::ostream& out) const {
  const auto metrics = data::write_tiny_task(task);
  out << "wrote " << task.out_dir.string() << ": " << metrics["train"] << " train, "
      << metrics["test"] << " test problems, vocabulary " << metrics["vocab_size"] << ", mean "
      << metrics["train_tokens"]["mean_total_tokens"] << " (max "
      << metrics["train_tokens"]["max_total_tokens"] << ") tokens per chat document\n";
}

}  // namespace rqat::cli
