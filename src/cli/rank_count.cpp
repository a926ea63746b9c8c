// check_rank_count and the command lines it prints: rank_count.h.
#include "src/cli/rank_count.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>
#include <utility>

#include "wallfacer/core/error.h"

namespace wf::cli {
namespace {

// Open MPI gives a node one slot per core this process may run on (not per hardware thread): the
// distinct cores of /proc/cpuinfo among the CPUs of the affinity mask (a container's cpuset), else
// the hardware threads.
int core_count() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const bool masked = sched_getaffinity(0, sizeof allowed, &allowed) == 0;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string processor, physical, line;
  while (std::getline(cpuinfo, line)) {
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string value = line.substr(colon + 1);
    if (line.starts_with("processor")) processor = value;
    if (line.starts_with("physical id")) physical = value;
    if (line.starts_with("core id") && (!masked || CPU_ISSET(std::atoi(processor.c_str()), &allowed))) {
      cores.emplace(physical, value);
    }
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

std::string command_words(const std::vector<std::string>& args) {
  std::string line = shell_word(program_path());
  for (const std::string& arg : args) line.append(" ").append(shell_word(arg));
  return line;
}

std::vector<std::string> with_sets(std::vector<std::string> args, const std::vector<std::string>& sets) {
  for (const std::string& set : sets) {
    args.push_back("--set");
    args.push_back(set);
  }
  return args;
}

}  // namespace

std::string program_path() {
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  std::string first;
  if (std::getline(cmdline, first, '\0') && !first.empty()) return first;
  return "wallfacer";
}

std::string shell_word(std::string_view word) {
  const bool plain = !word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                             "0123456789_-./=:,+@%") == std::string_view::npos;
  if (plain) return std::string(word);
  std::string quoted = "'";
  for (const char c : word) quoted.append(c == '\'' ? "'\\''" : std::string(1, c));
  return quoted.append("'");
}

std::string mpirun_line(int ranks, const std::vector<std::string>& args) {
  std::string line = "mpirun";
  if (geteuid() == 0 && std::getenv("OMPI_ALLOW_RUN_AS_ROOT") == nullptr) line += " --allow-run-as-root";
  if (ranks > core_count()) line += " --oversubscribe";
  return fmt::format("{} -np {} {}", line, ranks, command_words(args));
}

std::string train_command_line(int ranks, const std::string& config_path, const std::vector<std::string>& sets) {
  const std::vector<std::string> args = with_sets({"train", config_path}, sets);
  return ranks == 1 ? command_words(args) : mpirun_line(ranks, args);
}

int ranks_sharing_machine(int ranks_per_machine, int ranks) {
  return ranks_per_machine == 0 ? ranks : std::min(ranks_per_machine, ranks);
}

void check_rank_count(const config::RunConfig& config, int world_size, const std::string& config_path,
                      const std::vector<std::string>& overrides, RankCountCommand command,
                      config::ValidateScope scope, double machine_bytes, int ranks_per_machine) {
  const config::ParallelSection& p = config.parallel;
  const std::int64_t needed = config::ranks_needed(p);
  if (needed == 0 || needed == world_size) return;  // another problem, or none: validate says which
  const int n = static_cast<int>(needed);
  const auto train_line = [&](int ranks, const std::vector<std::string>& sets) {
    return train_command_line(ranks, config_path, sets);
  };
  std::string message = fmt::format("{} needs {} ranks (dp {} x tp {} x pp {} x sp {}), but ", config_path, n, p.dp,
                                    p.tp, p.pp, p.sp);
  if (command == RankCountCommand::train) {
    message += fmt::format("this job has {}: run `{}`", world_size, train_line(n, overrides));
  } else {
    message += fmt::format("validate checks it for {} (-n {}): check it with `{}`, train it with `{}`", world_size,
                           world_size, command_words(with_sets({"validate", config_path, "-n", std::to_string(n)},
                                                               overrides)),
                           train_line(n, overrides));
  }
  const auto sharing = [&](int ranks) { return ranks_sharing_machine(ranks_per_machine, ranks); };
  if (const auto problems = config::validation_problems(config, n, scope, machine_bytes, sharing(n));
      !problems.empty()) {
    message += fmt::format("; at {} ranks it would still fail: {}", n, fmt::join(problems, "; "));
  }
  const auto fits = config::fitting_layouts(config, world_size, scope, machine_bytes, 1, sharing(world_size));
  if (!fits.empty()) {
    std::vector<std::string> sets = overrides;
    sets.insert(sets.end(), fits.front().keys.begin(), fits.front().keys.end());
    message += fmt::format("; or, with {} rank{} as now: `{}`", world_size, world_size == 1 ? "" : "s",
                           train_line(world_size, sets));
  }
  throw UserError(message);
}

}  // namespace wf::cli
