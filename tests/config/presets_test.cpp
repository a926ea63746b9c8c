// Every preset in configs/ loads and validates for the world size its first lines state
// ("# world: N") without a note, and writes under runs/<preset>/, so a preset cannot rot as the
// rules change.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "config/config_test_util.h"
#include "wallfacer/config/run_config.h"

namespace wf::config {
namespace {

namespace fs = std::filesystem;

// tests/config/presets_test.cpp -> the repository root.
fs::path repository_root() { return fs::path(WF_SOURCE_DIR); }

// The text after the first "# <marker>:" line, or "" when there is none.
std::string stated(const fs::path& file, const std::string& marker) {
  std::ifstream in(file);
  const std::string prefix = "# " + marker + ":";
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(prefix)) return line.substr(prefix.size());
  }
  return "";
}

// The N of the first "# world: N" line, or 0 when there is none.
int stated_world_size(const fs::path& file) {
  const std::string world = stated(file, "world");
  return world.empty() ? 0 : std::stoi(world);
}

TEST_CASE("config: every preset in configs/ validates for its stated world size, without notes", "[config]") {
  const fs::path dir = repository_root() / "configs";
  REQUIRE(fs::is_directory(dir));
  int presets = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    ++presets;
    DYNAMIC_SECTION(entry.path().filename().string()) {
      const int world = stated_world_size(entry.path());
      INFO("a preset states its world size in a line '# world: N'");
      REQUIRE(world > 0);
      const RunConfig config = load_config(entry.path().string());
      // The presets' data files are the machine's (prepare-text writes them), not the preset's.
      const test::TempYaml data("data.bin", "");
      // "# machine: gpu": a GPU shape, checked as a config (this CPU build cannot train it);
      // every other preset must be trainable here, as `wallfacer train` would check it.
      const bool gpu = stated(entry.path(), "machine").find("gpu") != std::string::npos;
      CHECK_NOTHROW(validate(test::with_data_file(config, data.path()), world,
                             gpu ? ValidateScope::any_machine : ValidateScope::this_machine));
      // The file spells out a real run, not the defaults.
      CHECK_FALSE(config == RunConfig{});
      // A preset run as intended draws no remark: notes are for settings that cannot matter.
      CHECK(notes(config).empty());
      // Every run writes under runs/<preset>/, checkpoints in its checkpoints/ (README, docs).
      const std::string run = "runs/" + entry.path().stem().string();
      CHECK(config.checkpoint.dir == run + "/checkpoints");
      CHECK(config.log.dir == run);
      CHECK(config.log.metrics_file == "metrics.jsonl");
    }
  }
  CHECK(presets >= 5);
}

// A GPU preset names its card on its "# machine:" line ("# machine: gpu, H100 80GB (...)"): the
// memory validate expects a rank to need (config::memory_per_rank, the estimate `validate` and
// `train` refuse a layout by) must fit that many GB (10^9 bytes, as cards are sold).
TEST_CASE("config: every GPU preset fits its stated card by validate's memory estimate", "[config]") {
  int gpu_presets = 0;
  for (const auto& entry : fs::directory_iterator(repository_root() / "configs")) {
    const std::string machine = stated(entry.path(), "machine");
    if (entry.path().extension() != ".yaml" || machine.find("gpu") == std::string::npos) continue;
    ++gpu_presets;
    DYNAMIC_SECTION(entry.path().filename().string()) {
      std::smatch card;
      INFO("a GPU preset names its card and its memory, e.g. '# machine: gpu, H100 80GB (...)'; got:" << machine);
      REQUIRE(std::regex_search(machine, card, std::regex(R"(([0-9]+) ?GB)")));
      const double card_bytes = std::stod(card[1].str()) * 1e9;
      const MemoryEstimate need = memory_per_rank(load_config(entry.path().string()));
      const double gib = double(1ULL << 30);
      INFO("validate estimates " << need.total() / gib << " GiB per rank: " << need.parameter_bytes() / gib
                                 << " GiB for weights, gradients and AdamW state (parallel.zero shards it), "
                                 << need.activation_bytes / gib << " GiB of activations");
      CHECK(need.total() <= card_bytes);
    }
  }
  CHECK(gpu_presets >= 1);
}

TEST_CASE("config: gpt-tiny is the 4-rank CPU preset with WallFacer sequence parallelism", "[config]") {
  const RunConfig c = load_config((repository_root() / "configs" / "gpt-tiny.yaml").string());
  CHECK(c.parallel.dp * c.parallel.sp == 4);
  CHECK(c.parallel.sp_strategy == parallel::SpStrategy::wallfacer);
  CHECK(c.data.tokenizer == TokenizerKind::byte);
  CHECK(c.train.dtype == DType::f32);
}

}  // namespace
}  // namespace wf::config
