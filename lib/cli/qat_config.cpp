// See qat_config.h.
#include "cli/qat_config.h"

#include <iostream>

#include "io/manifest.h"

namespace rqat::cli {

tools::QatCommandOptions QatConfig::resolve() const {
  tools::QatCommandOptions o = options;
  o.model_dir = model;
  o.out_dir = out;
  if (!teacher.empty()) o.teacher_dir = teacher;
  o.spec = quant.resolve_spec();
  o.init = quant.init;
  o.fake_quant = quant.fake_quant;
  o.data.path = data;
  o.data.enable_thinking = !disable_thinking;
  if (!eval_data.empty()) {
    data::TextDataOptions eval = o.data;
    eval.path = eval_data;
    eval.max_documents.reset();
    o.eval_data = eval;
  }
  runtime.apply();
  o.device = runtime.resolved_device();
  o.dtype = runtime.resolved_dtype();
  o.record = io::OptionsRecord::of(*this);
  return o;
}

int qat_tool_main(int argc, char** argv, tools::QatObjective objective, const char* description) {
  io::set_process_args(argc, argv);
  CLI::App app{description};
  QatConfig config(objective);
  add_config_flags(app, config);
  CLI11_PARSE(app, argc, argv);
  int exit_code = 0;
  const int status = run_tool(enum_name(objective).data(), [&] {
    exit_code = tools::run_qat_command(config.resolve(), std::cout).exit_code;
  });
  return status != 0 ? status : exit_code;
}

}  // namespace rqat::cli
