#pragma once
// The cost model of `wallfacer tune`: one training step of a run config (model, batch, layout)
// on a cluster, predicted without running it. docs/tuning.md derives every term.
//
// Compute: the GEMMs' FLOPs (forward, backward = 2 × forward, the checkpoint's recompute = one
// more forward) at the device's matmul rate; the attention kernel's FLOPs (4·d per visible
// (query, key) pair forward, 2.5 × that backward: FlashAttention's recompute of the scores) at
// its attention rate; the elementwise ops, norms and the optimizer at memory bandwidth.
//
// Communication: every phase of every strategy, with the bytes of parallel/traffic_model.h (and
// train/step_traffic.h for tp, pp and the gradient reduction), timed by tune::Network over the
// real groups of comm::ProcessGrid placed on the cluster's nodes. What overlaps:
//   ring / WallFacer  each ring step's P2P with that step's block of attention (double buffer)
//   WallFacer         the Q and K all-gathers with the K and V projections (two thirds of the
//                     QKV GEMM, the paper's §4.2.1)
//   gradient sync     the buckets of the last backward with that backward (ZeRO-2: each
//                     microbatch's reduce-scatter with its own backward)
// all scaled by ClusterSpec::overlap. Everything else is exposed: the dispatch, the team's
// reduce-scatters, Ulysses' all-to-alls, tp's all-reduces, the pipeline's sends.
// Pipeline: (m·v + pp − 1)/v stage-microbatch times of the slowest stage (the bubble).
//
// Memory per rank: config::memory_per_rank's weights, gradients, AdamW state (ZeRO) and saved
// activations, plus the strategy's attention buffers at the peak of one layer (ring: the K/V and
// dK/dV in flight; Ulysses: the head-sharded copies; WallFacer: the team's C-fold Q/K/V, kept
// and travelling K/V, partial O — the paper's (Y + 3C + 1)·A) and the recompute's working set.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "wallfacer/config/run_config.h"
#include "wallfacer/tune/cluster.h"

namespace wf::tune {

// One named share of a prediction.
struct Term {
  std::string name;
  double value = 0;
};

struct Prediction {
  double step_seconds = 0;
  double tokens_per_second = 0;
  // Exposed seconds per kind, summing to step_seconds: "matmul", "attention", "elementwise",
  // "optimizer", "sp communication", "tp communication", "pp communication", "pp bubble",
  // "dp communication" (only kinds with time).
  std::vector<Term> time;
  // Bytes per rank (the busiest rank: a pipeline's last stage) by kind: "weights", "gradients",
  // "optimizer", "activations", "attention buffers", "recompute".
  std::vector<Term> memory;
  // Bytes one rank (rank 0) sends per step, by process group (as comm::TrafficRegistry counts
  // them): what the formulas predict, for the tests and the report.
  std::map<std::string, double> traffic;

  double memory_bytes() const;
  const Term& dominant() const;  // the largest time term
};

// The step of `config` (its layout's world dp·tp·pp·sp ranks on the cluster's first devices).
// wf::UserError when the world does not fit on the cluster; the config must be valid
// (config::validation_problems(..., any_machine) empty), the search checks that first.
Prediction predict_step(const config::RunConfig& config, const ClusterSpec& cluster);

// The sp groups' bytes of one attention call (forward and backward, or replayed backward when
// the model checkpoints at the attention output) as the cost model moves them, for EVERY world
// rank: group kind ("sp", "sp.team", "sp.ring") → bytes sent per rank. The tests compare each
// with train::sp_call_bytes (the formulas the counters are tested against).
std::map<std::string, std::vector<double>> sp_call_bytes_per_rank(const config::RunConfig& config);

}  // namespace wf::tune
