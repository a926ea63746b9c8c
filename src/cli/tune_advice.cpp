// What `wallfacer tune` prints under its answer so that it can be acted on: a legend of the best
// layout's name, and the command line that trains the config with that layout.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "src/cli/rank_count.h"  // shell_word
#include "src/cli/tune_modes.h"
#include "wallfacer/tune/search.h"

namespace wf::cli {

std::string train_command_line(const std::string& config_path, const config::RunConfig& file_config,
                               const config::RunConfig& best, int world) {
  std::string line = fmt::format("mpirun -np {} build/wallfacer train {}", world, shell_word(config_path));
  for (const std::string& o : config::overrides_between(file_config, best)) line += " --set " + shell_word(o);
  return line;
}

void print_best_layout_advice(const std::string& config_path, const config::RunConfig& best, int world,
                              const std::string& write_best) {
  const std::vector<tune::LabelPart> parts = tune::layout_parts(best);
  std::size_t width = 0;
  for (const tune::LabelPart& part : parts) width = std::max(width, part.text.size());
  std::printf("\nthe best layout's name, field by field:\n");
  for (const tune::LabelPart& part : parts) {
    std::printf("  %-*s  %s\n", static_cast<int>(width), part.text.c_str(), part.meaning.c_str());
  }
  // The flags are every key the best layout changes in the file, --set overrides included.
  std::printf("train it (every setting that differs from %s):\n  %s\n", config_path.c_str(),
              train_command_line(config_path, config::load_config(config_path), best, world).c_str());
  if (write_best.empty()) {
    std::printf("  (or add --write-best FILE.yaml to write it as a config: mpirun -np %d build/wallfacer train "
                "FILE.yaml)\n", world);
  } else {
    std::printf("  or, as written to %s: mpirun -np %d build/wallfacer train %s\n", write_best.c_str(), world,
                shell_word(write_best).c_str());
  }
}

}  // namespace wf::cli
