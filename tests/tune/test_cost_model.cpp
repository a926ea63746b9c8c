// The cost model's communication equals the traffic formulas the counters are tested against
// (train::sp_call_bytes per rank; tp and dp from step_traffic.h), its terms react to the
// layout as they must, and the search's space and exclusion reasons.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>

#include "wallfacer/comm/process_grid.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/train/step_traffic.h"
#include "wallfacer/tune/cost_model.h"
#include "wallfacer/tune/search.h"

namespace wf::tune {
namespace {

config::RunConfig tiny(const std::string& parallel) {
  return config::parse_config(R"(
model: {name: gpt, n_layer: 2, n_head: 8, n_kv_head: 2, d_model: 64, d_ff: 128, vocab_size: 64, max_seq_len: 256}
train: {seq_len: 128, micro_batch_size: 2, global_batch_size: 4}
data: {source: synthetic}
parallel: )" + parallel + "\n");
}

ClusterSpec one_node(int devices) {
  ClusterSpec c;
  c.name = "one-node";
  c.nodes = 1;
  c.devices_per_node = devices;
  c.device = device_preset("a100-80gb");
  c.intra_node.bandwidth_gbs = 100;
  c.intra_node.latency_us = 2;
  return c;
}

TEST_CASE("the cost model's sp bytes equal the traffic formulas on every rank", "[tune]") {
  const char* layouts[] = {
      "{sp: 4, sp_strategy: ring}",
      "{sp: 4, sp_strategy: ulysses}",
      "{sp: 4, sp_strategy: wallfacer, C: 2}",
      "{sp: 8, sp_strategy: wallfacer, C: 2}",
      "{sp: 8, sp_strategy: wallfacer, C: 2, placement: p2p-intra}",
      "{dp: 2, sp: 4, sp_strategy: wallfacer, C: 2, order: sp-dp-tp-pp}",
      "{tp: 2, sp: 4, sp_strategy: wallfacer, C: 2, placement: p2p-intra}",
      "{tp: 2, sp: 4, sp_strategy: ulysses, order: sp-tp-dp-pp}",
      "{pp: 2, sp: 4, sp_strategy: ring}",
      "{sp: 4, sp_strategy: ulysses-wallfacer, U: 2}",
      "{sp: 8, sp_strategy: ulysses-wallfacer, U: 2, C: 2}",
      "{sp: 8, sp_strategy: ulysses-wallfacer, U: 2, C: 2, ulysses_inner: false}",
      "{sp: 8, sp_strategy: ulysses-wallfacer, U: 4, ulysses_inner: false}",
      "{tp: 2, sp: 4, sp_strategy: ulysses-wallfacer, U: 2, order: sp-tp-dp-pp}",
      "{sp: 4, sp_strategy: ulysses-wallfacer, U: 4}",
  };
  for (const char* layout : layouts) {
    for (const bool checkpoint : {false, true}) {
      for (const char* dtype : {"f32", "bf16"}) {
        config::RunConfig c = tiny(layout);
        c.model.set("checkpoint_attention", checkpoint);
        c.train.dtype = std::string(dtype) == "bf16" ? DType::bf16 : DType::f32;
        INFO(layout << " checkpoint " << checkpoint << " " << dtype);
        const int world = c.parallel.dp * c.parallel.tp * c.parallel.pp * c.parallel.sp;
        REQUIRE(config::validation_problems(c, world, config::ValidateScope::any_machine).empty());
        const auto modelled = sp_call_bytes_per_rank(c);
        const parallel::AttentionDims dims{2, 128, 8 / c.parallel.tp, 2 / c.parallel.tp, 8};
        for (int r = 0; r < world; ++r) {
          const comm::ProcessGrid grid(c.parallel.grid(), world, r);
          const auto formula =
              train::sp_call_bytes(c.parallel.sp_strategy, dims, grid, train::sp_element_bytes(c), checkpoint);
          for (const auto& [group, bytes] : formula) {
            INFO("rank " << r << " group " << group);
            CHECK(modelled.at(group)[static_cast<std::size_t>(r)] == static_cast<double>(bytes));
          }
        }
      }
    }
  }
}

TEST_CASE("a prediction's terms sum to its step and follow the layout", "[tune]") {
  const ClusterSpec cluster = one_node(8);
  const Prediction ring = predict_step(tiny("{sp: 8, sp_strategy: ring}"), cluster);
  double sum = 0;
  for (const Term& t : ring.time) sum += t.value;
  CHECK(sum == Approx(ring.step_seconds));
  CHECK(ring.tokens_per_second == Approx(4 * 128 / ring.step_seconds));
  // One process: no communication at all.
  config::RunConfig single = tiny("{}");
  single.train.micro_batch_size = 4;
  const Prediction alone = predict_step(single, one_node(1));
  for (const Term& t : alone.time) CHECK(t.name.find("communication") == std::string::npos);
  // The checkpoint costs a recompute and saves activations.
  config::RunConfig with = tiny("{sp: 8, sp_strategy: ring}");
  with.model.set("checkpoint_attention", true);
  const Prediction checkpointed = predict_step(with, cluster);
  const auto term = [](const Prediction& p, const std::string& name) {
    for (const Term& t : p.memory) if (t.name == name) return t.value;
    for (const Term& t : p.time) if (t.name == name) return t.value;
    return 0.0;
  };
  // (the blocks' GEMMs run forward twice; the head's once)
  CHECK(term(checkpointed, "matmul") > term(ring, "matmul"));
  CHECK(term(checkpointed, "matmul") < term(ring, "matmul") * 4 / 3);
  CHECK(term(checkpointed, "activations") < term(ring, "activations"));
  // ZeRO shards the optimizer state over the replicas.
  config::RunConfig zero = tiny("{sp: 8, sp_strategy: ring, zero: 1}");
  CHECK(term(predict_step(zero, cluster), "optimizer") == Approx(term(ring, "optimizer") / 8));
  // WallFacer holds its team's C-fold Q/K/V: more attention buffers than ring.
  CHECK(term(predict_step(tiny("{sp: 8, sp_strategy: wallfacer, C: 2}"), cluster), "attention buffers") >
        term(ring, "attention buffers"));
  // The traffic per group matches the step formulas for tp too.
  const Prediction tp = predict_step(tiny("{tp: 2, sp: 4, sp_strategy: ring}"), cluster);
  CHECK(tp.traffic.at("tp") > 0);
  CHECK_THROWS_WITH(predict_step(tiny("{sp: 8, sp_strategy: ring}"), one_node(4)),
                    Catch::Contains("needs 8 ranks but cluster 'one-node' has 4 devices"));
}

std::set<std::string> labels(const std::vector<Candidate>& all, bool excluded) {
  std::set<std::string> out;
  for (const Candidate& c : all) {
    if (c.excluded.empty() != excluded) out.insert(layout_label(c.config));
  }
  return out;
}

const Candidate& find(const std::vector<Candidate>& all, const std::string& label) {
  const auto it = std::find_if(all.begin(), all.end(), [&](const Candidate& c) { return layout_label(c.config) == label; });
  REQUIRE(it != all.end());
  return *it;
}

TEST_CASE("the search of 4 ranks, sp only: every strategy, team size, ZeRO stage, checkpoint and micro batch", "[tune]") {
  const auto everything = search_layouts(tiny("{}"), one_node(4), {.world = 4, .sp_only = true});
  CHECK(everything.size() == 54 + 36);
  std::vector<Candidate> all;
  for (const Candidate& c : everything) {
    if (c.config.parallel.sp_strategy != parallel::SpStrategy::ulysses_wallfacer) all.push_back(c);
  }
  CHECK(labels(all, false) == std::set<std::string>{
      "dp1.tp1.pp1.sp4.ring.mb2.z0",      "dp1.tp1.pp1.sp4.ring.mb2.z0.ckpt",      "dp1.tp1.pp1.sp4.ring.mb2.z1",
      "dp1.tp1.pp1.sp4.ring.mb2.z1.ckpt", "dp1.tp1.pp1.sp4.ring.mb2.z2",           "dp1.tp1.pp1.sp4.ring.mb2.z2.ckpt",
      "dp1.tp1.pp1.sp4.ring.mb4.z0",      "dp1.tp1.pp1.sp4.ring.mb4.z0.ckpt",      "dp1.tp1.pp1.sp4.ring.mb4.z1",
      "dp1.tp1.pp1.sp4.ring.mb4.z1.ckpt", "dp1.tp1.pp1.sp4.ring.mb4.z2",           "dp1.tp1.pp1.sp4.ring.mb4.z2.ckpt",
      "dp1.tp1.pp1.sp4.ring.z0",          "dp1.tp1.pp1.sp4.ring.z0.ckpt",          "dp1.tp1.pp1.sp4.ring.z1",
      "dp1.tp1.pp1.sp4.ring.z1.ckpt",     "dp1.tp1.pp1.sp4.ring.z2",               "dp1.tp1.pp1.sp4.ring.z2.ckpt",
      "dp1.tp1.pp1.sp4.ulysses.mb2.z0",   "dp1.tp1.pp1.sp4.ulysses.mb2.z0.ckpt",   "dp1.tp1.pp1.sp4.ulysses.mb2.z1",
      "dp1.tp1.pp1.sp4.ulysses.mb2.z1.ckpt", "dp1.tp1.pp1.sp4.ulysses.mb2.z2",     "dp1.tp1.pp1.sp4.ulysses.mb2.z2.ckpt",
      "dp1.tp1.pp1.sp4.ulysses.mb4.z0",   "dp1.tp1.pp1.sp4.ulysses.mb4.z0.ckpt",   "dp1.tp1.pp1.sp4.ulysses.mb4.z1",
      "dp1.tp1.pp1.sp4.ulysses.mb4.z1.ckpt", "dp1.tp1.pp1.sp4.ulysses.mb4.z2",     "dp1.tp1.pp1.sp4.ulysses.mb4.z2.ckpt",
      "dp1.tp1.pp1.sp4.ulysses.z0",       "dp1.tp1.pp1.sp4.ulysses.z0.ckpt",       "dp1.tp1.pp1.sp4.ulysses.z1",
      "dp1.tp1.pp1.sp4.ulysses.z1.ckpt",  "dp1.tp1.pp1.sp4.ulysses.z2",            "dp1.tp1.pp1.sp4.ulysses.z2.ckpt",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.mb2.z0",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.mb2.z0.ckpt",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.mb2.z1",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.mb2.z1.ckpt",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.mb2.z2",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.mb2.z2.ckpt",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.mb4.z0",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.mb4.z0.ckpt",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.mb4.z1",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.mb4.z1.ckpt",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.mb4.z2",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.mb4.z2.ckpt",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.z0",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.z0.ckpt",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.z1",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.z1.ckpt",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.z2",
      "dp1.tp1.pp1.sp4.wallfacer.C2.collectives-intra.z2.ckpt",
  });
  CHECK(labels(all, true).empty());
  // The hybrid's Ulysses degree 2 × a WallFacer group of 2 (C = 1 only: C² | 2), either
  // dimension inner: 36 more.
  const auto hybrids = search_layouts(tiny("{}"), one_node(4), {.world = 4, .sp_only = true});
  std::set<std::string> hybrid;
  for (const std::string& label : labels(hybrids, false)) {
    if (label.find("ulysses-wallfacer") != std::string::npos && label.ends_with(".z0")) hybrid.insert(label);
  }
  CHECK(hybrid == std::set<std::string>{
      "dp1.tp1.pp1.sp4.ulysses-wallfacer.U2.inner.C1.collectives-intra.mb2.z0",
      "dp1.tp1.pp1.sp4.ulysses-wallfacer.U2.inner.C1.collectives-intra.mb4.z0",
      "dp1.tp1.pp1.sp4.ulysses-wallfacer.U2.inner.C1.collectives-intra.z0",
      "dp1.tp1.pp1.sp4.ulysses-wallfacer.U2.outer.C1.collectives-intra.mb2.z0",
      "dp1.tp1.pp1.sp4.ulysses-wallfacer.U2.outer.C1.collectives-intra.mb4.z0",
      "dp1.tp1.pp1.sp4.ulysses-wallfacer.U2.outer.C1.collectives-intra.z0",
  });
  // Ranked: fastest first.
  CHECK(std::is_sorted(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    return a.prediction.step_seconds < b.prediction.step_seconds;
  }));
}

TEST_CASE("the search's cost follows the world it ranks, not the nodes the cluster file lists", "[tune]") {
  // 8 ranks on the first node of 131,072: the same layouts and predictions as on a cluster of 2
  // nodes, in about the same time. Sizing the links by the cluster's devices made each phase
  // walk all 1,048,576 of them: minutes for this search (0.1 s on 2 nodes).
  const auto cluster = [](int nodes) {
    return parse_cluster(fmt::format(R"(
nodes: {}
devices_per_node: 8
device: {{preset: h100-80gb}}
links:
  intra_node: {{bandwidth_gbs: 370, latency_us: 3.7}}
  inter_node: {{bandwidth_gbs: 46, latency_us: 5}}
  node_egress_gbs: 368
)", nodes));
  };
  const auto small = search_layouts(tiny("{}"), cluster(2), {.world = 8});
  const auto started = std::chrono::steady_clock::now();
  const auto huge = search_layouts(tiny("{}"), cluster(131072), {.world = 8});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  CHECK(seconds < 20);  // generous (a sanitizer build on a busy machine); before: minutes
  REQUIRE(huge.size() == small.size());
  for (std::size_t i = 0; i < huge.size(); ++i) {
    INFO(layout_label(huge[i].config));
    CHECK(layout_label(huge[i].config) == layout_label(small[i].config));
    CHECK(huge[i].excluded == small[i].excluded);
    CHECK(huge[i].prediction.step_seconds == small[i].prediction.step_seconds);
  }
}

TEST_CASE("the search of 8 ranks excludes layouts with the reason validate gives", "[tune]") {
  const auto all = search_layouts(tiny("{}"), one_node(8), {.world = 8});
  // Ulysses over 8 ranks cannot scatter 8 heads with 2 kv heads... it can; over tp 2 × sp 4 the
  // 4 heads a tp rank holds scatter over 4. tp 8 cannot split 2 kv heads.
  CHECK_THAT(find(all, "dp1.tp8.pp1.sp1.z0").excluded, Catch::Contains("n_kv_head"));
  // 4 sequences per step cannot be split over dp 8.
  CHECK_THAT(find(all, "dp8.tp1.pp1.sp1.z0").excluded, Catch::Contains("train.global_batch_size"));
  // A pipeline of 8 stages over 2 layers.
  CHECK_THAT(find(all, "dp1.tp1.pp8.sp1.1f1b.z0").excluded, Catch::Contains("parallel.pp"));
  // A sequence that zigzag cannot split over 16 halves of 8 ranks: seq 120.
  config::RunConfig odd = tiny("{}");
  odd.train.seq_len = 120;
  const auto odd_all = search_layouts(odd, one_node(8), {.world = 8, .sp_only = true});
  CHECK_THAT(find(odd_all, "dp1.tp1.pp1.sp8.ring.z0").excluded, Catch::Contains("train.seq_len"));
  // A device too small for the model: memory, with the breakdown.
  ClusterSpec small = one_node(8);
  small.device.memory_gib = 1e-4;
  const auto none = search_layouts(tiny("{}"), small, {.world = 8, .sp_only = true});
  CHECK_THAT(none.front().excluded, Catch::Contains("memory: needs") && Catch::Contains("weights"));
  CHECK_THROWS_WITH(search_layouts(tiny("{}"), one_node(8), {.world = 16}),
                    Catch::Contains("--world 16: cluster 'one-node' has 8 devices"));
}

TEST_CASE("--seq raises a learned-position model's max_seq_len with the sequence", "[tune]") {
  const config::RunConfig c = with_seq_len(tiny("{}"), 1024);
  CHECK(c.train.seq_len == 1024);
  CHECK(c.model.get("max_seq_len") == "1024");
  CHECK(with_seq_len(tiny("{}"), 64).model.get("max_seq_len") == "256");
}

}  // namespace
}  // namespace wf::tune
