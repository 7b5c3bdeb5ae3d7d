// SIGTERM / SIGINT / SIGUSR1 during training: the first signal asks the run to stop after the
// current step (writing a checkpoint, as SLURM preemption and Ctrl-C expect; SIGUSR1 is what
// `#SBATCH --signal=USR1@N` sends N seconds before the time limit or a preemption); a second one
// ends the process at once. The handler only sets a flag; the training loop polls it between
// steps, and the tools exit with 128 + the signal.
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
