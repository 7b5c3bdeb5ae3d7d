// See engine_flags.h.
#include "cli/engine_flags.h"

namespace rqat::cli {

void add_engine_flags(CLI::App& app, generation::EngineOptions& options,
                      const std::string& batch_flag) {
  app.add_option(batch_flag, options.max_batch, "Sequences decoded together at most")
      ->capture_default_str();
  app.add_option("--kv-cache-gb", options.kv_cache_gb,
                 "KV cache budget in GiB (0: what the run can use; on CUDA at most "
                 "--gpu-memory-fraction of the free memory)")
      ->capture_default_str();
  app.add_option("--kv-block-size", options.block_size,
                 "Positions per KV cache block (a power of two)")
      ->capture_default_str();
  app.add_option("--gpu-memory-fraction", options.gpu_memory_fraction,
                 "CUDA: fraction of the free memory the default KV budget may take")
      ->capture_default_str();
  app.add_flag("--cuda-graphs,!--no-cuda-graphs", options.cuda_graphs,
               "CUDA: replay captured graphs for decode steps (default on)");
}

}  // namespace rqat::cli
