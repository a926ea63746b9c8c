#pragma once
// SIGINT (Ctrl-C) and SIGTERM (a scheduler's, or mpirun's when it is interrupted) during `train`:
// the first asks the run to save a checkpoint at the next step boundary and end (exit 128 +
// signal: 130, 143), as Megatron's exit-signal handler does; a second ends the process at once.
namespace wf::cli {

// Installs the handlers (SA_RESTART: a blocking call the signal interrupts goes on).
void catch_stop_signals();
// After the checkpoint a stop signal asked for: further ones (mpirun's SIGTERM once another rank
// has exited) are ignored while the process finalises MPI and exits.
void ignore_stop_signals();
// The first stop signal caught (SIGINT or SIGTERM), 0 while none has arrived.
int stop_signal();
// "SIGINT", "SIGTERM", else "a signal".
const char* signal_name(int signal);

}  // namespace wf::cli
