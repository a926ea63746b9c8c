// The cost model against the WallFacer paper's measurements (wallfacer-paper-digest.md §7.2,
// §7.4): its six GPT settings at batch 1 on 32 GPUs, predicted with the cluster files under
// clusters/ exactly as shipped (never fitted per panel), sequence parallelism only as the paper
// ran. Prints the predicted-vs-paper table that docs/tuning.md reproduces, then asserts the
// findings the model reproduces. docs/tuning.md says which it does not, and why.
#include <catch2/catch.hpp>

#include <cstdio>
#include <map>
#include <string>

#include "wallfacer/config/run_config.h"
#include "wallfacer/tune/search.h"

namespace wf::tune {
namespace {

struct Panel {
  const char* cluster;
  const char* model;
  std::int64_t seq;
  double paper_ring, paper_c2, paper_c4;  // K tokens/s, Fig. 7 (bar values as measured from the figure)
  double paper_speedup;                   // the text's best over ring
};

const Panel kPanels[] = {
    {"a100-16x2", "gpt-3b", 65536, 3.10, 5.06, 3.39, 1.6287},
    {"a100-16x2", "gpt-3b", 131072, 3.70, 5.27, 3.70, 1.4245},
    {"a100-8x4", "gpt-3b", 65536, 3.02, 2.55, 4.10, 1.3598},
    {"a100-8x4", "gpt-3b", 131072, 3.73, 3.19, 4.46, 1.199},
    {"h100-8x8", "gpt-7b", 65536, 21.0, 34.1, 37.3, 1.7712},
    {"h100-8x8", "gpt-7b", 131072, 13.47, 18.17, 18.10, 1.3462},
};

// The best predicted tokens/s of each strategy ("ring", "wallfacer-2", ...) over every other
// choice the search makes (placement, ZeRO, checkpoint).
std::map<std::string, double> best_by_strategy(const char* cluster, const char* model, std::int64_t seq, int world) {
  const std::string root = WF_SOURCE_DIR;
  const config::RunConfig base = config::load_config(root + "/configs/" + model + ".yaml");
  const ClusterSpec spec = load_cluster(root + "/clusters/" + cluster + ".yaml");
  std::map<std::string, double> best;
  for (const Candidate& c : search_layouts(base, spec, {.world = world, .sp_only = true, .seq_len = seq})) {
    if (!c.excluded.empty()) continue;
    double& b = best[strategy_label(c.config)];
    b = std::max(b, c.prediction.tokens_per_second);
  }
  return best;
}

TEST_CASE("the paper's six GPT settings on 32 GPUs: WallFacer beats ring, the best C, the speedups", "[tune][paper]") {
  std::printf("| cluster | model, seq | ring K tok/s (paper) | WallFacer-2 | WallFacer-4 | best C (paper) | "
              "speedup over ring (paper) | ratio |\n|---|---|---|---|---|---|---|---|\n");
  for (const Panel& p : kPanels) {
    const auto best = best_by_strategy(p.cluster, p.model, p.seq, 32);
    const double ring = best.at("ring"), c2 = best.at("wallfacer-2"), c4 = best.at("wallfacer-4");
    const int best_c = c2 >= c4 ? 2 : 4, paper_c = p.paper_c2 >= p.paper_c4 ? 2 : 4;
    const double speedup = std::max(c2, c4) / ring;
    std::printf("| %s | %s %lldK | %.2f (%.2f) | %.2f (%.2f) | %.2f (%.2f) | %d (%d) | %.2fx (%.2fx) | %.2f |\n",
                p.cluster, p.model, static_cast<long long>(p.seq / 1024), ring / 1e3, p.paper_ring, c2 / 1e3, p.paper_c2,
                c4 / 1e3, p.paper_c4, best_c, paper_c, speedup, p.paper_speedup, speedup / p.paper_speedup);
    INFO(p.cluster << " " << p.model << " " << p.seq);
    // WallFacer beats ring attention in all six.
    CHECK(speedup > 1.0);
    const std::string cluster = p.cluster;
    if (cluster.starts_with("a100")) {
      // The best C: 2 on the 16-GPU nodes, 4 on the 8-GPU nodes; speedups within a factor 1.5.
      CHECK(best_c == paper_c);
      CHECK(speedup / p.paper_speedup < 1.5);
      CHECK(p.paper_speedup / speedup < 1.5);
    } else if (p.seq == 131072) {
      // H100 at 128K: C 2 and C 4 within a few percent (the paper: 0.4%).
      CHECK(std::abs(c2 - c4) / std::max(c2, c4) < 0.05);
    } else {
      // H100 at 64K: the model puts C 2 and C 4 within a few percent, the paper C 4 ahead by 9%;
      // the speedup within a factor 1.5.
      CHECK(std::abs(c2 - c4) / std::max(c2, c4) < 0.05);
      CHECK(speedup / p.paper_speedup < 1.5);
    }
  }
}

TEST_CASE("the paper's H100 strong scaling at 128K: WallFacer keeps rising from 8 to 64 GPUs", "[tune][paper]") {
  const double paper_ring[] = {5.27, 8.27, 10.82, 9.42}, paper_wall[] = {5.01, 9.21, 14.57, 15.14};
  std::printf("| GPUs | ring K tok/s (paper) | WallFacer, best C (paper) |\n|---|---|---|\n");
  double previous_wall = 0, previous_ring = 0;
  int i = 0;
  for (const int world : {8, 16, 32, 64}) {
    const auto best = best_by_strategy("h100-8x8", "gpt-7b", 131072, world);
    double wall = 0;
    for (const auto& [strategy, tokens] : best) {
      if (strategy.starts_with("wallfacer")) wall = std::max(wall, tokens);
    }
    const double ring = best.at("ring");
    std::printf("| %d | %.2f (%.2f) | %.2f (%.2f) |\n", world, ring / 1e3, paper_ring[i], wall / 1e3, paper_wall[i]);
    INFO("world " << world);
    CHECK(wall > previous_wall);          // WallFacer keeps rising
    if (world <= 32) CHECK(ring > previous_ring * 0.95);  // ring rises (or holds) up to 32
    previous_wall = wall;
    previous_ring = ring;
    ++i;
  }
}

}  // namespace
}  // namespace wf::tune
