// `wallfacer validate CFG.yaml [-n N] [--set section.key=value]...`: loads a run config, applies
// the overrides and checks it against a world of N ranks, exactly as `wallfacer train` would
// before starting, so a layout can be fixed before a job is queued. Prints "config OK: <summary>"
// or the one error message, and exits 1.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "src/cli/commands.h"
#include "src/cli/rank_count.h"
#include "wallfacer/config/run_config.h"

namespace wf::cli {
namespace {
struct ValidateOptions {
  std::string path;
  int world = 1;
  std::vector<std::string> overrides;
  bool any_machine = false;
  int ranks_per_node = 0;  // 0: all the ranks on this machine
};
}  // namespace

void add_validate_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("validate", "Check a run config (YAML) against a world of N ranks");
  auto options = std::make_shared<ValidateOptions>();
  command->add_option("config", options->path, "The run config, e.g. configs/gpt-tiny.yaml")->required();
  // -n / --np / --world; main() reads mpirun's spelling "-np" as --np.
  command->add_option("-n,--np,--world", options->world, "Number of ranks the run would launch with")
      ->capture_default_str();
  command->add_option("--set", options->overrides, "Override one key, e.g. --set train.lr=3e-4 (repeatable)");
  command->add_option("--ranks-per-node", options->ranks_per_node,
                      "Ranks that will share one machine's memory (default: all N, as `mpirun -np N` here runs "
                      "them); the memory check counts their estimates together")
      ->check(CLI::PositiveNumber);
  command->add_flag("--any-machine", options->any_machine,
                    "Check the config alone, not whether this build and this machine can train it (e.g. a GPU preset "
                    "on a laptop: bf16, tensor/pipeline parallelism, memory per rank)");
  set_action(*command, [options] {
    const config::RunConfig config = config::load_config(options->path, options->overrides);
    const auto scope = options->any_machine ? config::ValidateScope::any_machine : config::ValidateScope::this_machine;
    // What train would say for this world: the ranks the layout needs and the command to run it.
    check_rank_count(config, options->world, options->path, options->overrides, RankCountCommand::validate, scope,
                     /*machine_bytes=*/0, options->ranks_per_node);
    config::validate(config, options->world, scope, /*machine_bytes=*/0,
                     ranks_sharing_machine(options->ranks_per_node, options->world));
    std::printf("config OK: %s\n", config::summary(config, options->world).c_str());
    for (const std::string& note : config::notes(config)) std::printf("note: %s\n", note.c_str());
    return kExitOk;
  });
}

}  // namespace wf::cli
