#pragma once
// Sequence-parallel attention cases for test_dist, written once for every strategy (ring,
// Ulysses, WallFacer, ulysses-wallfacer): run_sp_case shards a global random problem over the world (sp = world
// size), runs forward and backward through make_sp_attention, and checks on every rank
//   - output, lse and dQ, dK, dV, gathered over the ranks, against the naive f64 reference on the
//     whole sequence (relative error; f64 ≤ 1e-10, f32 ≤ 1e-5);
//   - the traffic counters of the sp groups ("sp", "sp.team", "sp.ring") after the forward and
//     after the backward against traffic_model.h, per rank and summed over the ranks (packed
//     documents: with the ring hops of document_ring_steps.h);
//   - when the strategy counts its work (SpAttentionWork), the unmasked pairs of every rank
//     against sequence_layout.h's work functions.
// Every rank must call it with the same case at the same point (it communicates).
#include <cstdint>
#include <optional>
#include <vector>

#include "dist_testing.h"
#include "parallel/attention_testing.h"
#include "wallfacer/comm/process_grid.h"
#include "wallfacer/parallel/block_attention.h"
#include "wallfacer/parallel/document_ring_steps.h"
#include "wallfacer/parallel/sp_attention.h"
#include "wallfacer/parallel/traffic_model.h"

namespace wf::test {

struct SpCase {
  parallel::SpStrategy strategy = parallel::SpStrategy::ring;
  int C = 1;  // WallFacer team size (the grid's C); ring and Ulysses ignore it
  int U = 1;  // ulysses-wallfacer's Ulysses degree (the grid's U); 1 for the other strategies
  bool ulysses_inner = true;
  bool causal = true;
  std::int64_t B = 1, h = 4, h_kv = 4, d = 4, N = 0;
  DType dtype = DType::f64;
  // Default: zigzag for causal masks, contiguous for full ones.
  std::optional<parallel::SequenceLayout> layout;
  bool keep_forward_kv = true;
  bool lse_grad = true;  // a random gradient on lse as well as on O
  std::uint64_t seed = 1;
  // Bytes per element the strategy sends; default: train::sp_element_bytes's rule, the dtype's
  // size for activations and the compute dtype's (f64 for f64, else f32) for statistics and
  // partial sums.
  std::optional<parallel::ElementBytes> bytes;
  // Where q, k, v and the gradients live (the results are brought back to the CPU to compare),
  // and, for a device, how its tensors travel: nccl attaches the device's own transport to the
  // grid (on the test device its stand-in for NCCL), staged goes through host memory over MPI.
  Device device = Device::cpu();
  comm::GpuTransport transport = comm::GpuTransport::nccl;
  // Packed documents (AttentionOptions::doc_bounds; empty: one document). The reference runs
  // each document alone, and the work check becomes: the ranks' pairs sum to the documents'
  // pairs times the copies of the work (P for Ulysses, U for the hybrid, 1 otherwise).
  DocumentBounds doc_bounds = {};

  parallel::SequenceLayout layout_or_default() const;
  parallel::ElementBytes bytes_or_default() const;
};

struct SpCaseResult {
  // Global results, gathered from every rank: o, dq [B, N, h, d], lse [B, h, N], dk, dv
  // [B, N, h_kv, d], in the case's dtype. Identical on every rank.
  Tensor o, lse, dq, dk, dv;
  // Relative errors against the f64 reference.
  double error_o = 0, error_lse = 0, error_dq = 0, error_dk = 0, error_dv = 0;
  double max_error() const;
  // Summed over the ranks, forward and backward.
  parallel::SpTraffic total_forward, total_backward;
  // Unmasked pairs of each rank's forward, by logical sp index (empty: the strategy does not count).
  std::vector<std::int64_t> forward_pairs;
  // This rank's host synchronisations during the forward and backward (a device's own transport
  // makes none: the streams wait for each other on the device).
  std::int64_t host_syncs = 0;
};

// f64 1e-10, f32 1e-5; bf16 2e-2: inputs are bf16 (the reference uses the same rounded values),
// the blocks multiply in bf16 with f32 accumulation where the CPU does so natively (P and dS
// rounded to bf16 before their products), else in f32, and outputs and gradients are rounded to
// bf16 once: a few 2^-8 of the largest value either way.
double sp_tolerance(DType dtype);

// The case's global problem and its f64 reference (reference_attention): for f32 and f64 drawn
// in the case's dtype; for bf16 drawn in f32, rounded, and the reference recomputed on the
// rounded values. A softmax scale other than 0 (1/sqrt(d)) recomputes it for that scale.
ReferenceAttention sp_reference(const SpCase& c, double scale = 0.0);

// The grid of the world with sp = world size, team size C and a placement, made on first use and
// kept (its communicators are collective to create: every rank reaches the first use of each
// (C, placement) together). run_sp_case uses the default placement, collectives-intra.
comm::CommGrid& sp_grid(int C, comm::Placement placement = comm::Placement::collectives_intra, int U = 1,
                        bool ulysses_inner = true);

// Each value's maximum over the world's ranks (a collective).
std::vector<double> max_over_world(std::vector<double> values);

// Packed document boundaries: 0, then lengths cycling through `lengths` until N (the last one cut
// at N).
std::vector<std::int64_t> packed(std::int64_t N, const std::vector<std::int64_t>& lengths);

// The hops of the case's K/V ring (ring attention) or sub-ring (WallFacer, the hybrid's WallFacer
// part) in one pass: document_ring_steps.h on the layout's runs; kFullRing when unpacked.
int expected_ring_hops(const SpCase& c, int P, parallel::Pass pass);
// What traffic_model.h says one rank of a case moves in one pass, and the sum over ranks (with
// the case's ring hops).
parallel::SpTraffic expected_sp_traffic(const SpCase& c, int P, int logical_index, parallel::Pass pass);
parallel::SpTraffic expected_sp_traffic_total(const SpCase& c, int P, parallel::Pass pass);

SpCaseResult run_sp_case(const SpCase& c);
// Whether two cases gave the same o, lse, dq, dk and dv, bit for bit.
bool bitwise_equal(const SpCaseResult& a, const SpCaseResult& b);
// The same for the common parameters; P must be the world size.
SpCaseResult run_sp_case(parallel::SpStrategy strategy, int P, int C, bool causal, std::int64_t B, std::int64_t h,
                         std::int64_t h_kv, std::int64_t d, std::int64_t N, DType dtype);

}  // namespace wf::test
