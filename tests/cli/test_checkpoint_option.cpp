// src/cli/checkpoint_option.h: --checkpoint of generate and sample. A checkpoint whose saved run
// config does not load is skipped for the previous step when --checkpoint names the run's
// checkpoint.dir, and named (its real manifest) with the previous step as the fix when it names
// that step's directory.
#include <catch2/catch.hpp>

#include <string>

#include "data/data_testing.h"
#include "src/cli/checkpoint_option.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/tensor.h"

using Catch::Matchers::Contains;
using wf::data::testing::TempDir;

namespace {

constexpr const char* kGoodConfig = R"(
model: {name: gpt, n_layer: 1, n_head: 2, d_model: 8, d_ff: 16, vocab_size: 16, max_seq_len: 8}
train: {seq_len: 8, micro_batch_size: 1, global_batch_size: 1}
data: {source: synthetic}
)";

wf::train::Checkpoint checkpoint_with_config(std::int64_t step, std::string config_yaml) {
  wf::train::Checkpoint c;
  c.step = step;
  c.model.insert("w", wf::Tensor::ones({2}));
  c.config_yaml = std::move(config_yaml);
  return c;
}

std::string error_of(const std::string& path) {
  try {
    wf::cli::load_checkpoint_and_config(path);
  } catch (const wf::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("--checkpoint: a saved config that does not load falls back to the previous step, or says how",
          "[cli][checkpoint]") {
  TempDir tmp;
  const std::string store = tmp.file("ckpt");
  wf::train::CheckpointStore writer(store, 0);
  const std::string good = writer.save(checkpoint_with_config(3, kGoodConfig));
  const std::string bad = writer.save(checkpoint_with_config(6, "model: [garbage\n"));

  // The run's checkpoint.dir: step 6 is skipped (with a warning), step 3 and its config used.
  const wf::cli::CheckpointAndConfig loaded = wf::cli::load_checkpoint_and_config(store);
  CHECK(loaded.checkpoint.step == 3);
  CHECK(loaded.config.model.name == "gpt");

  // Step 6's own directory: the real manifest named (not <checkpoint.dir>/manifest.json), and the
  // previous step as the fix.
  const std::string message = error_of(bad);
  CHECK_THAT(message, Contains(bad + "/manifest.json"));
  CHECK_THAT(message, Contains("give --checkpoint " + store + " (the run's checkpoint.dir"));
  CHECK_THAT(message, Contains("or the previous step: --checkpoint " + good));
  CHECK(wf::cli::load_checkpoint_and_config(good).checkpoint.step == 3);

  // No checkpoint of the run loads: each named in the warnings, and the error says so.
  TempDir alone;
  const std::string only =
      wf::train::CheckpointStore(alone.file("ckpt"), 0).save(checkpoint_with_config(6, "- a list\n"));
  CHECK_THAT(error_of(alone.file("ckpt")), Contains("none of the 1 checkpoints in"));
  CHECK_THAT(error_of(only), Contains("holds no other checkpoint; train again"));
  CHECK_THAT(error_of(""), Contains("--checkpoint '': no such file or directory"));
}
