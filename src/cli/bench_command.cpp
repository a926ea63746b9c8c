// `wallfacer bench`: the group that holds the benchmarks (kernels, comm, attention, gpt, layout, device). It does
// nothing itself; each benchmark is a subcommand in its own file.
#include "src/cli/commands.h"

namespace wf::cli {

CLI::App& add_bench_group(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Measure performance: kernels, attention strategies, communication, training layouts");
  bench->require_subcommand(1);
  return *bench;
}

}  // namespace wf::cli
