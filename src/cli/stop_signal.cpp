// catch_stop_signals and stop_signal: stop_signal.h.
#include "src/cli/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace wf::cli {
namespace {

std::atomic<int> g_signal{0};

void on_stop_signal(int signal) {
  int none = 0;
  if (g_signal.compare_exchange_strong(none, signal)) return;  // the first: the training loop acts on it
  // A second: only async-signal-safe calls from here on.
  static const char kLine[] = "wallfacer: a second stop signal: exiting now, without saving a checkpoint\n";
  [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, kLine, sizeof kLine - 1);
  _exit(128 + signal);
}

}  // namespace

void catch_stop_signals() {
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

void ignore_stop_signals() {
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
}

int stop_signal() { return g_signal.load(); }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace wf::cli
