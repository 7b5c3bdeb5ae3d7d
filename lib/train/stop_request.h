// SIGTERM / SIGINT during training: the first signal asks the run to stop after the current step
// (writing a checkpoint, as SLURM preemption and Ctrl-C expect); a second one ends the process at
// once. The handler only sets a flag; the training loop polls it between steps.
#pragma once

namespace rqat::train {

class StopRequest {
 public:
  // Installs the handlers for the object's lifetime and restores the previous ones after.
  StopRequest();
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  bool requested() const;
  int signal() const;  // the signal number received, 0 when none
  // For tests: behave as if `signal_number` had arrived.
  static void simulate(int signal_number);
};

}  // namespace rqat::train
