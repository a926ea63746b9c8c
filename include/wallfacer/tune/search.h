#pragma once
// The layout search of `wallfacer tune`: every layout of a world for one model and batch, each
// either excluded with the reason `wallfacer validate` (or the memory model) gives, or predicted
// by tune/cost_model.h; ranked by predicted step time.
//
// The space, for a world of W ranks: every dp × tp × pp × sp = W; under pp each schedule (1F1B,
// GPipe, interleaved with 2 chunks) and every micro batch size that divides the batch; under sp
// ring attention, Ulysses, WallFacer with every C > 1 with C² | sp in both placements (one
// where the placements coincide, sp = C²), and the ulysses-wallfacer hybrid with every Ulysses
// degree 1 < U < sp, either dimension inner, every C with C² | sp/U and both placements; ZeRO 0, 1, 2 where the replica group has more than
// one rank; the activation checkpoint at the attention output on and off where the model has one.
// Order and the other keys stay the config's.
#include <cstdint>
#include <string>
#include <vector>

#include "wallfacer/config/run_config.h"
#include "wallfacer/tune/cluster.h"
#include "wallfacer/tune/cost_model.h"

namespace wf::tune {

struct SearchOptions {
  int world = 0;              // ranks; 0: every device of the cluster
  bool sp_only = false;       // dp = tp = pp = 1: sequence parallelism over the whole world
  std::int64_t seq_len = 0;   // 0: the config's train.seq_len
};

struct Candidate {
  config::RunConfig config;  // the user's config with this layout
  std::string excluded;      // why it cannot run on the cluster ("" when it can)
  Prediction prediction;     // when not excluded
};

// The user's config with --seq applied: train.seq_len, and model.max_seq_len raised to it where
// the model has that key (a limit of learned positions; RoPE models take any length).
config::RunConfig with_seq_len(config::RunConfig config, std::int64_t seq_len);

// Every candidate of the space, the runnable ones first, fastest first; then the excluded ones.
std::vector<Candidate> search_layouts(const config::RunConfig& base, const ClusterSpec& cluster,
                                      const SearchOptions& options);

// A layout's name: "dp1.tp1.pp1.sp32.wallfacer.C4.collectives-intra.z2.ckpt",
// "dp1.tp1.pp1.sp32.ulysses-wallfacer.U8.inner.C2.collectives-intra.z2" (the strategy part only
// with sp > 1, the schedule with pp > 1, "mb2" for a micro batch of 2).
std::string layout_label(const config::RunConfig& config);
// The fields of that name, each with what it means and the config key that sets it (the legend
// `tune` prints for its best layout).
struct LabelPart {
  std::string text;     // "C4"
  std::string meaning;  // "WallFacer team size, ... (parallel.C)"
};
std::vector<LabelPart> layout_parts(const config::RunConfig& config);
// Whether the config's model checkpoints at the attention output (false for a model without that key).
bool checkpoints_attention(const config::RunConfig& config);

// The strategy name, WallFacer's with its C: "ring", "ulysses", "wallfacer-4",
// "ulysses-wallfacer"; "none" without sp.
std::string strategy_label(const config::RunConfig& config);

}  // namespace wf::tune
