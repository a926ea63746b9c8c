#pragma once
// What `train` and `validate` say when a config's layout needs another number of ranks than the
// job has (train started without mpirun, or with another -np): the count it needs and the exact
// command that runs it, instead of a list of parallel keys.
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/config/run_config.h"

namespace wf::cli {

// The program as it was started ("build/wallfacer"), for commands printed to be run as they are.
std::string program_path();
// `word` as a shell reads it back: itself when it is plain, else in single quotes.
std::string shell_word(std::string_view word);
// "mpirun -np N <program> <args>" with the flags Open MPI needs here: --allow-run-as-root as root
// (unless OMPI_ALLOW_RUN_AS_ROOT is set) and --oversubscribe for more ranks than cores.
std::string mpirun_line(int ranks, const std::vector<std::string>& args);

// The command that trains `config_path` with `sets` (--set overrides) on `ranks` ranks: the program
// alone for one rank, under mpirun_line for more.
std::string train_command_line(int ranks, const std::string& config_path, const std::vector<std::string>& sets);

enum class RankCountCommand { train, validate };

// The ranks of a world of `ranks` that share one machine when at most `ranks_per_machine` do (0:
// all of them, as `mpirun -np N` on one machine runs them).
int ranks_sharing_machine(int ranks_per_machine, int ranks);

// Throws wf::UserError when `config` needs dp x tp x pp x sp ranks other than `world_size`: the
// count, the command that runs (or validates) it with the user's --set overrides, what the config
// would still lack at that count, and a layout of `world_size` ranks that validates, if any.
// `ranks_per_machine`: the ranks sharing a machine's memory (config::validate), 0 for all of them.
void check_rank_count(const config::RunConfig& config, int world_size, const std::string& config_path,
                      const std::vector<std::string>& overrides, RankCountCommand command,
                      config::ValidateScope scope, double machine_bytes = 0, int ranks_per_machine = 0);

}  // namespace wf::cli
