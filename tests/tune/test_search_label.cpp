// What `tune` prints to act on its answer: the label's fields each name the key that sets them,
// and config::overrides_between turns the user's config into any candidate (the --set flags of
// the printed command line).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "wallfacer/config/run_config.h"
#include "wallfacer/tune/search.h"

namespace wf::tune {
namespace {

TEST_CASE("tune: a candidate's --set flags rebuild it from the user's config; its label's fields name their keys",
          "[tune]") {
  const config::RunConfig user = config::parse_config(R"(
model: {name: gpt, n_layer: 4, n_head: 8, n_kv_head: 8, d_model: 64, d_ff: 128, vocab_size: 64, max_seq_len: 128,
        checkpoint_attention: true}
train: {seq_len: 128, micro_batch_size: 1, global_batch_size: 4, lr: 1.0e-4}
data: {source: synthetic}
parallel: {sp: 2, placement: p2p-intra}
)");
  ClusterSpec cluster;
  cluster.name = "one-node";
  cluster.nodes = 1;
  cluster.devices_per_node = 8;
  cluster.device = device_preset("a100-80gb");
  cluster.intra_node.bandwidth_gbs = 100;
  cluster.intra_node.latency_us = 2;
  // --seq 256 raises model.max_seq_len too: both must be in the flags.
  const std::vector<Candidate> all = search_layouts(user, cluster, {.world = 8, .seq_len = 256});
  int checked = 0, pipelines = 0, hybrids = 0;
  for (const Candidate& c : all) {
    if (!c.excluded.empty()) continue;
    const std::vector<std::string> flags = config::overrides_between(user, c.config);
    config::RunConfig rebuilt = user;
    for (const std::string& flag : flags) config::apply_override(rebuilt, flag);
    INFO(layout_label(c.config) << ": " << fmt::format("{}", fmt::join(flags, " ")));
    CHECK(rebuilt == c.config);
    CHECK(std::find(flags.begin(), flags.end(), "model.max_seq_len=256") != flags.end());
    CHECK(std::find(flags.begin(), flags.end(), "train.lr=0.0001") == flags.end());  // unchanged: no flag
    std::string label;
    for (const LabelPart& part : layout_parts(c.config)) {
      label += (label.empty() ? "" : ".") + part.text;
      CHECK_THAT(part.meaning, Catch::Matches(".*\\((parallel|train|model)\\.[A-Za-z_]+.*\\)"));
    }
    CHECK(label == layout_label(c.config));
    ++checked;
    pipelines += c.config.parallel.pp > 1 ? 1 : 0;
    hybrids += c.config.parallel.sp_strategy == parallel::SpStrategy::ulysses_wallfacer ? 1 : 0;
  }
  CHECK(checked > 50);
  CHECK(pipelines > 0);
  CHECK(hybrids > 0);
  CHECK(config::overrides_between(user, user).empty());
}

}  // namespace
}  // namespace wf::tune
