// SIGTERM / SIGINT / SIGUSR1 during a long run: the first signal asks the run to stop at the next
// safe point (a trainer after the current step, with a checkpoint; eval-math after the samples
// in flight, its finished ones on disk), as SLURM preemption and Ctrl-C expect (SIGUSR1 is what
// `#SBATCH --signal=USR1@N` sends N seconds before the time limit or a preemption); a second one
// ends the process at once. The handler only sets a flag, which the run polls; the tools exit
// with 128 + the signal.
#pragma once

namespace rqat::io {

class StopRequest {
 public:
  // Installs the handlers for the object's lifetime and restores the previous ones after. The
  // first signal prints `message` (a string literal: it is written from the handler) on stderr.
  explicit StopRequest(const char* message = "stopping after this step (checkpoint)");
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  bool requested() const;
  int signal() const;  // the signal number received, 0 when none
  // For tests: behave as if `signal_number` had arrived.
  static void simulate(int signal_number);
};

}  // namespace rqat::io
