// `wallfacer bench kernels`: placeholder until the kernel benchmarks land.
#include "src/cli/commands.h"

namespace wf::cli {

void add_bench_kernels_command(CLI::App& bench) {
  CLI::App* command = bench.add_subcommand("kernels", "Time the CPU kernels against their references");
  set_action(*command, [] {
    print_error("bench kernels: not yet implemented");
    return kExitRuntimeError;
  });
}

}  // namespace wf::cli
