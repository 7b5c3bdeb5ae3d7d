#include "io/stop_request.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace rqat::io {
namespace {

std::atomic<int> g_signal{0};
std::atomic<const char*> g_message{""};
struct sigaction g_previous_term, g_previous_int, g_previous_usr1;

void on_signal(int number) {
  if (g_signal.exchange(number) != 0) {
    // Second signal: the user insists. _exit is async-signal-safe; 128 + n is the shell convention.
    _exit(128 + number);
  }
  static const char prefix[] = "\nsignal received: ";
  const char* message = g_message.load();
  size_t length = 0;
  while (message[length] != '\0') ++length;  // strlen is not async-signal-safe by POSIX's list
  (void)!write(STDERR_FILENO, prefix, sizeof(prefix) - 1);
  (void)!write(STDERR_FILENO, message, length);
  (void)!write(STDERR_FILENO, "\n", 1);
}

}  // namespace

StopRequest::StopRequest(const char* message) {
  g_signal = 0;
  g_message = message;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, &g_previous_term);
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGUSR1, &action, &g_previous_usr1);
}

StopRequest::~StopRequest() {
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGUSR1, &g_previous_usr1, nullptr);
}

bool StopRequest::requested() const { return g_signal.load() != 0; }
int StopRequest::signal() const { return g_signal.load(); }
void StopRequest::simulate(int signal_number) { g_signal = signal_number; }

}  // namespace rqat::io
