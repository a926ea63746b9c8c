// `wallfacer bench attention`: sequence-parallel attention (ring, Ulysses, WallFacer for every
// valid team size C) on the world of the current mpirun (sp = world size; a world of one works
// too), forward + backward, one row per (strategy, C):
//   - on --device (cpu, cuda, testdev or auto, resolved as train.device is): inputs moved there, and
//     each grid's groups given the device's transport (--transport, as comm.gpu_transport); every
//     clock stops after synchronize(device), so a time is the device's, not the host's enqueue time;
//   - time per call: the slowest rank's, median of --iters after a warm-up call;
//   - bytes: the traffic counters of the sp groups during one forward and one backward (the
//     warm-up call), per rank and summed over ranks, beside traffic_model.h's formulas;
//   - compute-only time: the same block_attention calls the strategy makes on this rank (same
//     query / key runs, same shapes, same schedule) on local data, with no communication; the
//     overlap efficiency is compute-only / total time (1 = communication fully hidden);
//   - communication-only time: the same strategy call with the attention blocks skipped
//     (parallel::detail::SkipBlockCompute), so only its messages and small merges run; the overlap
//     (compute + comm − total) / min(compute, comm), clamped to [0, 1], is the share of the
//     shorter of the two that the full call hid (1 = fully hidden, 0 = serial);
//   - compute rate: FLOPs of those calls per compute-only second, as a ratio to the rate of one
//     process running the same kernel on one full N/P × N/P block alone (rank 0, the others
//     waiting): how much sharing the machine and the block shapes cost;
//   - peak memory of a rank (on the device: its allocator's counts) during the warm-up call above
//     what was live before it: what one forward + backward needs besides its inputs (buffers,
//     saved tensors, outputs, gradients);
//   - max relative error of O, dQ, dK, dV against the f64 reference on the gathered result (only
//     while N·N·h ≤ 2^28: the reference is naive).
// FLOPs follow bench kernels: forward 4·d per visible (query, key) pair and head, backward 2.5×.
// With --check the command exits 1 when any measured byte count differs from its formula.
//
// --documents (bench_documents.h) runs a packed batch: every row above is the packed call (on the
// zigzag balanced by the documents' work, sequence_layout.h's document_chunks, as training lays a
// packed batch out), and each gets a second line: the packed call and the same tokens under the
// full causal mask timed in alternation (medians of --iters each), the work ratio (the documents'
// pairs / the causal mask's), the time ratios of the attention blocks alone (the compute-only
// schedule) and of the whole call, the blocks' quotient by the work against the 15% target (a
// packed batch's attention should cost what its work predicts; its messages are the traffic
// formula's, which documents shrink only by the ring steps they skip), and the
// per-rank work imbalance (max / mean − 1 of sp_rank_work_pairs) of the token zigzag and of the
// balanced layout (the measured work counters must equal the latter: work_exact).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/attention_reference.h"
#include "src/cli/bench_documents.h"
#include "src/cli/commands.h"
#include "src/cli/device_options.h"
#include "src/cli/option_checks.h"
#include "src/core/timing.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/comm/process_grid.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/comm/traffic.h"
#include "wallfacer/comm/transport.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/storage.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/parallel/block_attention.h"
#include "wallfacer/parallel/document_ring_steps.h"
#include "wallfacer/parallel/sp_attention.h"
#include "wallfacer/parallel/traffic_model.h"
#include "wallfacer/parallel/ulysses_heads.h"

namespace wf::cli {
namespace {

using Json = nlohmann::ordered_json;
using parallel::Pass;
using parallel::SpStrategy;
using parallel::SpTraffic;
using parallel::TokenRun;

constexpr double kMaxReferencePairs = double(1 << 28);  // N·N·h above which the naive reference is skipped
constexpr std::uint64_t kSeed = 20240601;
constexpr double kTimePerWorkTarget = 1.15;  // a packed batch costs at most 15% more than its work predicts

struct Options {
  std::int64_t seq = 4096, batch = 1, heads = 8, kv_heads = 0, head_dim = 64;  // kv_heads 0: = heads
  std::string mask = "causal";
  std::vector<std::string> strategies{"ring", "ulysses", "wallfacer"};
  std::vector<int> team_sizes;  // empty: every valid C
  int iters = 3;
  std::string dtype = "f32";
  std::string placement = "collectives-intra";
  std::string device = "cpu";      // cpu, cuda, testdev or auto (train.device's values)
  std::string transport = "auto";  // auto, nccl or staged (comm.gpu_transport's values)
  bool json = false;
  bool check = false;
  std::string documents;  // --documents: a packed batch (bench_documents.h); empty: one document
};

struct Problem {
  std::int64_t B, N, h, h_kv, d;
  bool causal;
  DType dtype;
  Device device;  // where the inputs, the strategies' work and the compute-only blocks are
  DocumentBounds documents = {};  // packed documents (one list for every row); empty: none
  parallel::SequenceLayout layout() const {
    return causal ? parallel::SequenceLayout::zigzag : parallel::SequenceLayout::contiguous;
  }
  parallel::AttentionDims dims() const { return {B, N, h, h_kv, d}; }
  parallel::ElementBytes bytes() const {  // inputs, statistics and partial sums all in the input dtype
    const auto a = static_cast<std::int64_t>(dtype_size(dtype));
    return {a, a, a};
  }
};

// A packed batch beside the full causal mask (--documents).
struct DocumentRow {
  // Both timed in alternation, call for call (medians), so that a machine shared with other work
  // slows both alike: the packed batch, and the same tokens under the full causal mask.
  double packed_time_ms = 0, causal_time_ms = 0;
  double packed_compute_ms = 0, causal_compute_ms = 0;  // the attention blocks alone, alike
  double work_ratio = 0;      // the documents' pairs / the causal mask's
  // Each iteration's packed / causal blocks' time (the adjacent pair): their spread says how far
  // the machine moved the medians' ratio (2-core VMs with ranks sharing cores: ±0.1 and more).
  std::vector<double> iteration_compute_ratios;
  std::vector<std::int64_t> zigzag_work, balanced_work;  // per logical rank (sp_rank_work_pairs)
  bool work_exact = true;  // every rank's measured forward pairs equal balanced_work
  int chunks = 0;          // the balanced layout's chunks (K = 2T·g; 0 without one)
  double time_ratio() const { return packed_time_ms / causal_time_ms; }
  double compute_ratio() const { return packed_compute_ms / causal_compute_ms; }
  // The target's measure: the attention blocks' time against what their work predicts.
  double compute_per_work() const { return compute_ratio() / work_ratio; }
  std::pair<double, double> compute_per_work_spread() const {
    const auto [lo, hi] = std::minmax_element(iteration_compute_ratios.begin(), iteration_compute_ratios.end());
    return {*lo / work_ratio, *hi / work_ratio};
  }
};

struct Row {
  std::string strategy;
  int P = 1, C = 1;
  SpTraffic forward, backward;                  // measured, summed over ranks
  SpTraffic formula_forward, formula_backward;  // traffic_model.h, summed over ranks
  std::vector<std::int64_t> p2p_fwd_per_rank, coll_fwd_per_rank, p2p_bwd_per_rank, coll_bwd_per_rank;  // sent
  bool traffic_exact = true;  // every rank's measured sent and received equal its formula
  std::string device, transport, transport_reason;  // transport: nccl or staged on a device, mpi on the cpu
  double time_ms = 0, compute_only_ms = 0, comm_only_ms = 0, compute_rate_ratio = 0;
  std::int64_t peak_mem_bytes = 0;
  std::optional<double> max_rel_error;
  std::optional<DocumentRow> documents;  // with --documents
};

double max_over_ranks(comm::Group& group, double value) {
  Tensor t = Tensor::full({1}, value, DType::f64);
  group.all_reduce(t, comm::ReduceOp::max);
  return t.to_vector<double>()[0];
}
double min_over_ranks(comm::Group& group, double value) { return -max_over_ranks(group, -value); }

// The median over `iters` calls of the slowest rank's time, every call started together.
double slowest_rank_median(comm::Group& world, Device device, int iters, const std::function<void()>& fn) {
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    synchronize(device);
    world.barrier();
    times.push_back(max_over_ranks(world, device_seconds(device, fn)));
  }
  return median(times);
}

// The share of the shorter of compute and communication that the full call hid, in [0, 1].
double overlap(const Row& r) {
  const double shorter = std::min(r.compute_only_ms, r.comm_only_ms);
  if (!(shorter > 0)) return 0;
  return std::clamp((r.compute_only_ms + r.comm_only_ms - r.time_ms) / shorter, 0.0, 1.0);
}

// ---- traffic ---------------------------------------------------------------------------


// The formula for one rank (by logical sp index) and the sum over ranks; a packed call's ring makes
// the hops its documents leave (document_ring_steps.h).
SpTraffic formula_traffic(SpStrategy strategy, const Problem& pr, int P, int C, int logical, Pass pass) {
  const int hops = parallel::sp_ring_hops(strategy, pr.layout(), pr.N, P, C, /*U=*/1, pr.causal, pr.documents, pass);
  return parallel::sp_attention_traffic(strategy, pr.dims(), P, /*U=*/1, C, logical, pass, pr.bytes(),
                                        parallel::BackwardKv::keep_forward, hops);
}
SpTraffic formula_total(SpStrategy strategy, const Problem& pr, int P, int C, Pass pass) {
  SpTraffic total;
  for (int l = 0; l < P; ++l) total += formula_traffic(strategy, pr, P, C, l, pass);
  return total;
}

std::vector<std::int64_t> gather_i64(comm::Group& group, std::int64_t value) {
  return group.all_gather(Tensor::from_vector(std::vector<std::int64_t>{value}, {1})).to_vector<std::int64_t>();
}

// ---- the compute-only schedule --------------------------------------------------------

// One block_attention call: queries [B, q_tokens, heads, d] at q_runs against K/V [B, kv_tokens,
// kv_heads, d] at kv_runs.
struct Block {
  std::vector<TokenRun> q_runs, kv_runs;
};
struct Schedule {
  std::int64_t heads = 0, kv_heads = 0;  // per rank (Ulysses: h/P, ulysses_kv_heads_per_rank)
  std::vector<Block> forward, backward;
};

std::int64_t tokens(const std::vector<TokenRun>& runs) {
  std::int64_t n = 0;
  for (const TokenRun& r : runs) n += r.length;
  return n;
}

// The blocks this rank computes, as the strategies compute them (ring_attention.cpp,
// ulysses_attention.cpp, wallfacer_attention.cpp).
Schedule compute_schedule(SpStrategy strategy, const Problem& pr, comm::CommGrid& grid,
                          const parallel::ChunkAssignment* chunks) {
  const int P = grid.grid().group_size("sp");
  const int me = grid.group("sp").rank();
  Schedule s{pr.h, pr.h_kv, {}, {}};
  switch (strategy) {
    case SpStrategy::ring: {  // my queries meet every rank's K/V once, forward and backward
      const auto runs = [&](int rank) { return parallel::rank_tokens(pr.layout(), pr.N, P, 1, rank, 1, chunks); };
      for (int step = 0; step < P; ++step) s.forward.push_back({runs(me), runs((me - step + P) % P)});
      s.backward = s.forward;
      break;
    }
    case SpStrategy::ulysses: {  // every token, h/P heads, one call (tokens in position order)
      s.heads = pr.h / P;
      s.kv_heads = parallel::ulysses_kv_heads_per_rank(pr.h_kv, P);
      const std::vector<TokenRun> all{{0, pr.N}};
      s.forward.push_back({all, all});
      s.backward = s.forward;
      break;
    }
    case SpStrategy::wallfacer: {
      // Forward: the team's queries meet the K/V of team kv_team_at_step(i), G steps. Backward:
      // the visiting query bundle of step i meets the K/V kept from step 0.
      const comm::WallFacerLayout& wl = grid.grid().wallfacer();
      const int C = wl.team_size(), G = wl.ring_size();
      const comm::SpPosition pos = wl.position(me);
      const auto team_runs = [&](int team) { return parallel::team_tokens(pr.layout(), pr.N, P, C, team, chunks); };
      const auto kv0 = team_runs(wl.kv_team_at_step(me, 0));
      for (int i = 0; i < G; ++i) {
        s.forward.push_back({team_runs(wl.team(me)), team_runs(wl.kv_team_at_step(me, i))});
        s.backward.push_back({team_runs(pos.team_group * G + (pos.ring_pos - i + G) % G), kv0});
      }
      break;
    }
    case SpStrategy::ulysses_wallfacer:  // refused with the options
      WF_FAIL("bench attention measures ring, ulysses and wallfacer; time ulysses-wallfacer layouts with "
              "`wallfacer bench layout`");
  }
  return s;
}

// Local data for every block of the schedule (distinct buffers per block, like the received
// ones), and the timed calls. Returns the FLOPs of one forward + backward.
class ComputeOnly {
 public:
  ComputeOnly(const Schedule& s, const Problem& pr) : s_(s), pr_(pr) {
    std::uint64_t at = 0;
    const auto draw = [&](std::int64_t n, std::int64_t heads) {
      Tensor t = Tensor::randn_at({pr.B, n, heads, pr.d}, kSeed + 7, at, pr.dtype);
      at += static_cast<std::uint64_t>(t.numel());
      return t.to(pr.device);
    };
    for (const std::vector<Block>* pass : {&s.forward, &s.backward}) {
      for (const Block& b : *pass) {
        const std::int64_t nq = tokens(b.q_runs), nk = tokens(b.kv_runs);
        data_.push_back({draw(nq, s.heads), draw(nk, s.kv_heads), draw(nk, s.kv_heads), draw(nq, s.heads),
                         Tensor::zeros({pr.B, nq, s.heads, pr.d}, pr.dtype, pr.device),
                         // A finite lse for every row, so that the backward's exponentials stay
                         // finite whatever rows the forward left empty (the time does not depend on it).
                         Tensor::full({pr.B, s.heads, nq}, std::log(double(std::max<std::int64_t>(nk, 1))), pr.dtype,
                                      pr.device),
                         Tensor::zeros({pr.B, nq, s.heads, pr.d}, pr.dtype, pr.device),
                         Tensor::zeros({pr.B, nk, s.kv_heads, pr.d}, pr.dtype, pr.device),
                         Tensor::zeros({pr.B, nk, s.kv_heads, pr.d}, pr.dtype, pr.device)});
      }
    }
  }

  // One forward + backward; returns its FLOPs.
  double run() {
    const double scale = 1.0 / std::sqrt(double(pr_.d));
    std::int64_t fwd_pairs = 0, bwd_pairs = 0;
    std::size_t i = 0;
    if (!s_.forward.empty()) {  // one running (o, lse) per query set: the forward's queries are one set
      BlockData& first = data_[0];
      Tensor o = Tensor::zeros(first.q.shape(), pr_.dtype, pr_.device);
      Tensor lse = Tensor::full({pr_.B, s_.heads, first.q.size(1)}, -INFINITY, pr_.dtype, pr_.device);
      for (const Block& b : s_.forward) {
        BlockData& d = data_[i++];
        fwd_pairs += parallel::block_attention_forward(d.q, b.q_runs, d.k, d.v, b.kv_runs, pr_.causal, scale, o, lse,
                                                       pr_.documents)
                         .unmasked_pairs;
      }
    }
    for (const Block& b : s_.backward) {
      BlockData& d = data_[i++];
      bwd_pairs += parallel::block_attention_backward(d.q, b.q_runs, d.k, d.v, b.kv_runs, pr_.causal, scale, d.o, d.lse,
                                                      d.d_o, Tensor(), d.dq, d.dk, d.dv, pr_.documents)
                       .unmasked_pairs;
    }
    const double per_pair = double(pr_.B * s_.heads * pr_.d) * 4.0;
    return per_pair * (double(fwd_pairs) + 2.5 * double(bwd_pairs));
  }

 private:
  struct BlockData {
    Tensor q, k, v, d_o, o, lse, dq, dk, dv;
  };
  Schedule s_;
  Problem pr_;
  std::vector<BlockData> data_;
};

// Seconds on the device (median of iters after a warm-up) and FLOPs of one call.
std::pair<double, double> time_compute(ComputeOnly& work, int iters, Device device) {
  const double flops = work.run();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) times.push_back(device_seconds(device, [&] { work.run(); }));
  return {median(times), flops};
}

// ---- inputs and the reference -------------------------------------------------------------

struct Inputs {
  Tensor q, k, v, d_o;  // global [B, N, heads, d]
};

Inputs global_inputs(const Problem& pr) {
  return {Tensor::randn_at({pr.B, pr.N, pr.h, pr.d}, kSeed, 0, pr.dtype),
          Tensor::randn_at({pr.B, pr.N, pr.h_kv, pr.d}, kSeed + 1, 0, pr.dtype),
          Tensor::randn_at({pr.B, pr.N, pr.h_kv, pr.d}, kSeed + 2, 0, pr.dtype),
          Tensor::randn_at({pr.B, pr.N, pr.h, pr.d}, kSeed + 3, 0, pr.dtype)};
}

struct Reference {
  Tensor o, dq, dk, dv;  // f64, global
};

template <class T>
Reference reference_of(const Problem& pr, const Inputs& in) {
  kernels::cpu::AttentionShape shape;
  shape.batch = pr.B;
  shape.q_len = shape.kv_len = pr.N;
  shape.heads = pr.h;
  shape.kv_heads = pr.h_kv;
  shape.head_dim = pr.d;
  shape.causal = pr.causal;
  Reference r{Tensor::empty(in.q.shape(), DType::f64), Tensor::empty(in.q.shape(), DType::f64),
              Tensor::empty(in.k.shape(), DType::f64), Tensor::empty(in.k.shape(), DType::f64)};
  Tensor lse = Tensor::empty({pr.B, pr.h, pr.N}, DType::f64);
  kernels::cpu::attention_forward_reference<T>(shape, in.q.data<T>(), in.k.data<T>(), in.v.data<T>(),
                                               r.o.data<double>(), lse.data<double>());
  kernels::cpu::attention_backward_reference<T>(shape, in.q.data<T>(), in.k.data<T>(), in.v.data<T>(),
                                                in.d_o.data<T>(), r.dq.data<double>(), r.dk.data<double>(),
                                                r.dv.data<double>());
  return r;
}

// max|a − r| / max|r|.
double relative_error(const Tensor& actual, const Tensor& reference) {
  const std::vector<double> a = actual.to_vector<double>(), r = reference.to_vector<double>();
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::abs(r[i]));
    diff = std::max(diff, std::isnan(a[i]) ? INFINITY : std::abs(a[i] - r[i]));
  }
  return diff / std::max(scale, 1e-300);
}

// Every rank's shards of o, dq, dk, dv put together in global order (on every rank).
std::vector<Tensor> gather_global(comm::Group& sp, const std::vector<Tensor>& local, const Problem& pr,
                                  const parallel::SpShard& shard, const std::vector<int>& logical_of_rank) {
  std::int64_t per_rank = 0;
  for (const Tensor& t : local) per_rank += t.numel();
  Tensor flat = Tensor::empty({per_rank}, pr.dtype);
  std::int64_t at = 0;
  for (const Tensor& t : local) {
    flat.slice0(at, at + t.numel()).copy_(t.view({t.numel()}));
    at += t.numel();
  }
  const Tensor all = sp.all_gather(flat);
  std::vector<Tensor> global;
  at = 0;
  for (const Tensor& t : local) {
    std::vector<Tensor> pieces(logical_of_rank.size());
    for (std::size_t r = 0; r < logical_of_rank.size(); ++r) {
      const std::int64_t from = static_cast<std::int64_t>(r) * per_rank + at;
      pieces[static_cast<std::size_t>(logical_of_rank[r])] = all.slice0(from, from + t.numel()).view(t.shape());
    }
    global.push_back(parallel::unshard_sequence(pieces, shard.layout, shard.P, shard.C, 1, shard.chunks.get()));
    at += t.numel();
  }
  return global;
}

// ---- one (strategy, C) -----------------------------------------------------------------------

// One strategy's forward + backward on this rank's shard of the inputs: packed when the problem
// has documents (on the layout balanced by their work, as the strategy lays them out itself).
class StrategyCall {
 public:
  StrategyCall(SpStrategy strategy, comm::CommGrid& grid, const Problem& pr, const Inputs& in)
      : config_{strategy, pr.layout(), pr.N, /*keep_forward_kv=*/true},
        shard_(parallel::sp_shard(config_, grid).for_documents(pr.documents)),
        attention_(parallel::make_sp_attention(config_, grid)) {
    q_ = shard_.shard(in.q).to(pr.device);
    k_ = shard_.shard(in.k).to(pr.device);
    v_ = shard_.shard(in.v).to(pr.device);
    d_o_ = shard_.shard(in.d_o).to(pr.device);
    for (Tensor* t : {&q_, &k_, &v_}) t->set_requires_grad();
    options_.causal = pr.causal;
    options_.doc_bounds = pr.documents;
  }

  // One call; with `forward` / `backward` the sp groups' traffic of each pass.
  AttentionResult operator()(SpTraffic* forward, SpTraffic* backward) {
    for (Tensor* t : {&q_, &k_, &v_}) t->set_grad(Tensor());
    if (forward != nullptr) comm::TrafficRegistry::instance().reset();
    AttentionResult out = attention_->forward(q_, k_, v_, options_);
    if (forward != nullptr) {
      *forward = parallel::measured_sp_traffic();
      comm::TrafficRegistry::instance().reset();
    }
    autograd::backward({out.out}, {d_o_});
    if (backward != nullptr) *backward = parallel::measured_sp_traffic();
    return out;
  }

  const parallel::SpShard& shard() const { return shard_; }
  const Tensor& q() const { return q_; }
  const Tensor& k() const { return k_; }
  const Tensor& v() const { return v_; }
  // The pairs the last forward computed on this rank (−1: the strategy does not count them).
  std::int64_t forward_pairs() const {
    const auto* work = dynamic_cast<const parallel::SpAttentionWork*>(attention_.get());
    return work != nullptr ? work->last_forward_work().unmasked_pairs : -1;
  }

 private:
  parallel::SpAttentionConfig config_;
  parallel::SpShard shard_;
  std::shared_ptr<nn::AttentionStrategy> attention_;
  Tensor q_, k_, v_, d_o_;
  AttentionOptions options_;
};

// The packed batch's second line: the full causal mask's time and both layouts' work per rank.
DocumentRow measure_documents(SpStrategy strategy, comm::CommGrid& grid, const Problem& pr, const Inputs& in,
                              int iters, StrategyCall& packed, const std::vector<std::int64_t>& measured) {
  comm::Group& world = comm::Runtime::get().world();
  const parallel::SpShard& shard = packed.shard();
  const int P = shard.P;
  DocumentRow d;
  Problem causal = pr;
  causal.documents.clear();
  StrategyCall full(strategy, grid, causal, in);
  full(nullptr, nullptr);  // warm-up
  // The attention blocks alone (the compute-only schedule on local data, every rank at once):
  // what the work predicts; the messages do not shrink with the documents.
  ComputeOnly packed_blocks(compute_schedule(strategy, pr, grid, shard.chunks.get()), pr);
  ComputeOnly causal_blocks(compute_schedule(strategy, causal, grid, nullptr), causal);
  causal_blocks.run();  // warm-up
  std::vector<double> packed_ms, causal_ms, packed_compute_ms, causal_compute_ms;
  for (int i = 0; i < iters; ++i) {
    packed_ms.push_back(slowest_rank_median(world, pr.device, 1, [&] { packed(nullptr, nullptr); }) * 1e3);
    causal_ms.push_back(slowest_rank_median(world, pr.device, 1, [&] { full(nullptr, nullptr); }) * 1e3);
    packed_compute_ms.push_back(slowest_rank_median(world, pr.device, 1, [&] { packed_blocks.run(); }) * 1e3);
    causal_compute_ms.push_back(slowest_rank_median(world, pr.device, 1, [&] { causal_blocks.run(); }) * 1e3);
  }
  d.packed_time_ms = median(packed_ms);
  d.causal_time_ms = median(causal_ms);
  d.packed_compute_ms = median(packed_compute_ms);
  d.causal_compute_ms = median(causal_compute_ms);
  const std::vector<TokenRun> all{{0, pr.N}};
  d.work_ratio = double(parallel::unmasked_pairs(all, all, true, pr.documents)) /
                 double(parallel::unmasked_pairs(all, all, true));
  for (int i = 0; i < iters; ++i) d.iteration_compute_ratios.push_back(packed_compute_ms[i] / causal_compute_ms[i]);
  for (int l = 0; l < P; ++l) {
    const auto work = [&](const parallel::ChunkAssignment* chunks) {
      return parallel::sp_rank_work_pairs(strategy, pr.layout(), pr.N, P, shard.C, 1, l, true, pr.documents, chunks);
    };
    d.zigzag_work.push_back(work(nullptr));
    d.balanced_work.push_back(work(shard.chunks.get()));
  }
  d.work_exact = measured == d.balanced_work;
  d.chunks = shard.chunks ? static_cast<int>(pr.N / shard.chunks->chunk_tokens) : 0;
  return d;
}

// `reference` is rank 0's (empty elsewhere); with_reference is the same on every rank.
Row measure(SpStrategy strategy, comm::CommGrid& grid, const Problem& pr, const Inputs& in, bool with_reference,
            const std::optional<Reference>& reference, int iters, double kernel_rate) {
  comm::Runtime& runtime = comm::Runtime::get();
  comm::Group& world = runtime.world();
  comm::Group& sp = grid.group("sp");
  const int P = sp.size();
  const int C = strategy == SpStrategy::wallfacer ? grid.grid().wallfacer().team_size() : 1;
  StrategyCall call(strategy, grid, pr, in);
  const parallel::SpShard& shard = call.shard();
  std::vector<int> logical_of_rank(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) {
    logical_of_rank[static_cast<std::size_t>(r)] =
        strategy == SpStrategy::wallfacer ? grid.grid().wallfacer().logical_index(r) : r;
  }

  Row row;
  row.strategy = parallel::sp_strategy_name(strategy);
  row.P = P;
  row.C = C;
  row.device = pr.device.str();
  if (pr.device.is_cpu()) {
    row.transport = "mpi";
    row.transport_reason = "cpu tensors go over MPI";
  } else {
    row.transport = comm::gpu_transport_name(grid.transport().transport);
    row.transport_reason = grid.transport().reason;
  }

  // Warm-up call: traffic, peak memory and the result.
  SpTraffic forward, backward;
  synchronize(pr.device);
  world.barrier();
  reset_peak_memory(pr.device);
  const std::int64_t live_before = memory_stats(pr.device).live_bytes;  // inputs (and the global copies) excluded
  const AttentionResult out = call(&forward, &backward);
  synchronize(pr.device);  // the call has run (and freed, in stream order) before the count is read
  std::vector<std::int64_t> measured_pairs(static_cast<std::size_t>(P));  // by logical index
  const std::vector<std::int64_t> pairs_of_rank = gather_i64(world, call.forward_pairs());
  for (int r = 0; r < P; ++r) {
    measured_pairs[static_cast<std::size_t>(logical_of_rank[static_cast<std::size_t>(r)])] =
        pairs_of_rank[static_cast<std::size_t>(r)];
  }
  row.peak_mem_bytes =
      static_cast<std::int64_t>(max_over_ranks(world, double(memory_stats(pr.device).peak_bytes - live_before)));

  const SpTraffic mine_fwd = formula_traffic(strategy, pr, P, C, shard.logical_index, Pass::forward);
  const SpTraffic mine_bwd = formula_traffic(strategy, pr, P, C, shard.logical_index, Pass::backward);
  row.forward = parallel::sum_over_ranks(sp, forward);
  row.backward = parallel::sum_over_ranks(sp, backward);
  row.formula_forward = formula_total(strategy, pr, P, C, Pass::forward);
  row.formula_backward = formula_total(strategy, pr, P, C, Pass::backward);
  const bool exact_here = forward == mine_fwd && backward == mine_bwd;
  row.traffic_exact = max_over_ranks(world, exact_here ? 0.0 : 1.0) == 0.0 && row.forward == row.formula_forward &&
                      row.backward == row.formula_backward;
  row.p2p_fwd_per_rank = gather_i64(world, forward.p2p_sent);
  row.coll_fwd_per_rank = gather_i64(world, forward.collective_sent);
  row.p2p_bwd_per_rank = gather_i64(world, backward.p2p_sent);
  row.coll_bwd_per_rank = gather_i64(world, backward.collective_sent);

  if (with_reference) {
    const auto host = [](const Tensor& t) { return t.to(Device::cpu()); };
    const std::vector<Tensor> global =
        gather_global(sp, {host(out.out), host(call.q().grad()), host(call.k().grad()), host(call.v().grad())}, pr,
                      shard, logical_of_rank);
    if (reference) {
      row.max_rel_error = std::max({relative_error(global[0], reference->o), relative_error(global[1], reference->dq),
                                    relative_error(global[2], reference->dk), relative_error(global[3], reference->dv)});
    }
  }

  const auto full_call = [&] { call(nullptr, nullptr); };
  row.time_ms = slowest_rank_median(world, pr.device, iters, full_call) * 1e3;
  {  // Communication only: the same call with the attention blocks skipped.
    const parallel::detail::SkipBlockCompute skip;
    row.comm_only_ms = slowest_rank_median(world, pr.device, iters, full_call) * 1e3;
  }

  // Compute only: the same blocks on local data, every rank at once (as in the real run).
  ComputeOnly work(compute_schedule(strategy, pr, grid, shard.chunks.get()), pr);
  synchronize(pr.device);
  world.barrier();
  const auto [seconds, flops] = time_compute(work, iters, pr.device);
  row.compute_only_ms = max_over_ranks(world, seconds) * 1e3;
  row.compute_rate_ratio = min_over_ranks(world, flops / seconds) / kernel_rate;
  if (!pr.documents.empty()) row.documents = measure_documents(strategy, grid, pr, in, iters, call, measured_pairs);
  return row;
}

// FLOP/s of one process alone on one full N/P × N/P block, fwd + bwd (the others wait).
double kernel_rate(const Problem& pr, int P, int iters) {
  comm::Group& world = comm::Runtime::get().world();
  double rate = 0;
  world.barrier();
  if (world.rank() == 0) {
    const std::vector<TokenRun> runs{{0, pr.N / P}};
    Problem full = pr;
    full.causal = false;
    ComputeOnly work(Schedule{pr.h, pr.h_kv, {{runs, runs}}, {{runs, runs}}}, full);
    const auto [seconds, flops] = time_compute(work, iters, pr.device);
    rate = flops / seconds;
  }
  return max_over_ranks(world, rate);  // only rank 0 has a non-zero value
}

// ---- output --------------------------------------------------------------------------------

std::string range_text(const std::vector<std::int64_t>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *lo == *hi ? fmt::format("{}", *lo) : fmt::format("{}..{}", *lo, *hi);
}

std::string error_text(const std::optional<double>& e) { return e ? fmt::format("{:.1e}", *e) : "n/a"; }

void print_json(const Row& r, const Problem& pr) {
  Json j;
  j["strategy"] = r.strategy;
  j["P"] = r.P;
  j["C"] = r.C;
  j["seq"] = pr.N;
  j["batch"] = pr.B;
  j["heads"] = pr.h;
  j["kv_heads"] = pr.h_kv;
  j["head_dim"] = pr.d;
  j["mask"] = pr.causal ? "causal" : "full";
  j["dtype"] = dtype_name(pr.dtype);
  j["device"] = r.device;
  j["transport"] = r.transport;
  j["p2p_bytes_fwd"] = r.forward.p2p_sent;
  j["p2p_bytes_bwd"] = r.backward.p2p_sent;
  j["collective_bytes_fwd"] = r.forward.collective_sent;
  j["collective_bytes_bwd"] = r.backward.collective_sent;
  j["formula_p2p_bytes_fwd"] = r.formula_forward.p2p_sent;
  j["formula_p2p_bytes_bwd"] = r.formula_backward.p2p_sent;
  j["formula_collective_bytes_fwd"] = r.formula_forward.collective_sent;
  j["formula_collective_bytes_bwd"] = r.formula_backward.collective_sent;
  j["p2p_bytes_fwd_per_rank"] = r.p2p_fwd_per_rank;
  j["p2p_bytes_bwd_per_rank"] = r.p2p_bwd_per_rank;
  j["collective_bytes_fwd_per_rank"] = r.coll_fwd_per_rank;
  j["collective_bytes_bwd_per_rank"] = r.coll_bwd_per_rank;
  j["traffic_exact"] = r.traffic_exact;
  j["time_ms"] = r.time_ms;
  j["compute_only_ms"] = r.compute_only_ms;
  j["comm_only_ms"] = r.comm_only_ms;
  j["overlap_efficiency"] = r.compute_only_ms / r.time_ms;
  j["overlap"] = overlap(r);
  j["compute_rate_ratio"] = r.compute_rate_ratio;
  j["peak_mem_bytes"] = r.peak_mem_bytes;
  j["max_rel_error"] = r.max_rel_error ? Json(*r.max_rel_error) : Json(nullptr);
  if (const std::optional<DocumentRow>& d = r.documents) {
    j["documents"] = pr.documents[0].size() - 1;
    j["layout_chunks"] = d->chunks;
    j["packed_time_ms"] = d->packed_time_ms;
    j["causal_time_ms"] = d->causal_time_ms;
    j["work_ratio"] = d->work_ratio;
    j["time_ratio"] = d->time_ratio();
    j["time_per_work"] = d->time_ratio() / d->work_ratio;
    j["packed_compute_ms"] = d->packed_compute_ms;
    j["causal_compute_ms"] = d->causal_compute_ms;
    j["compute_ratio"] = d->compute_ratio();
    j["compute_per_work"] = d->compute_per_work();
    j["compute_per_work_within_target"] = d->compute_per_work() <= kTimePerWorkTarget;
    j["compute_per_work_iterations_min"] = d->compute_per_work_spread().first;
    j["compute_per_work_iterations_max"] = d->compute_per_work_spread().second;
    j["imbalance_token_zigzag"] = parallel::work_imbalance(d->zigzag_work);
    j["imbalance_balanced"] = parallel::work_imbalance(d->balanced_work);
    j["work_per_rank_token_zigzag"] = d->zigzag_work;
    j["work_per_rank_balanced"] = d->balanced_work;
    j["work_exact"] = d->work_exact;
  }
  j["transport_reason"] = r.transport_reason;
  std::printf("%s\n", j.dump().c_str());
}

void print_table_header(const Problem& pr, int P) {
  std::printf("attention fwd+bwd: P = %d, N = %lld (%lld per rank), B = %lld, h = %lld, h_kv = %lld, d = %lld, %s, %s, "
              "on %s\n",
              P, static_cast<long long>(pr.N), static_cast<long long>(pr.N / P), static_cast<long long>(pr.B),
              static_cast<long long>(pr.h), static_cast<long long>(pr.h_kv), static_cast<long long>(pr.d),
              pr.causal ? "causal" : "full", dtype_name(pr.dtype), pr.device.str().c_str());
  if (!pr.documents.empty()) {
    const std::vector<TokenRun> all{{0, pr.N}};
    std::printf("packed: %s (one list for every row), %.4f of the causal mask's pairs; each row's second line: the "
                "same tokens under the full causal mask, the attention blocks' time / work against %.2f and the "
                "whole call's (the messages do not shrink with the documents), work imbalance (max / mean - 1) "
                "of the token zigzag and of the layout balanced by work\n",
                describe_documents(pr.documents[0]).c_str(),
                double(parallel::unmasked_pairs(all, all, true, pr.documents)) /
                    double(parallel::unmasked_pairs(all, all, true)),
                kTimePerWorkTarget);
  }
  std::printf("bytes: sent, summed over ranks (per-rank range in brackets); formula = traffic_model.h\n");
  std::printf("%-9s %2s %9s %9s %9s %6s %6s %6s %7s %8s %8s  %-30s %-30s %s\n", "strategy", "C", "time ms", "comp ms",
              "comm ms", "ovlp", "hidden", "rate", "mem MiB", "error", "exact", "fwd p2p / coll", "bwd p2p / coll",
              "formula fwd | bwd");
}

void print_table_row(const Row& r) {
  const std::string fwd = fmt::format("{} [{}] / {}", r.forward.p2p_sent, range_text(r.p2p_fwd_per_rank),
                                      r.forward.collective_sent);
  const std::string bwd = fmt::format("{} [{}] / {}", r.backward.p2p_sent, range_text(r.p2p_bwd_per_rank),
                                      r.backward.collective_sent);
  std::printf("%-9s %2d %9.1f %9.1f %9.1f %6.2f %6.2f %6.2f %7.1f %8s %8s  %-30s %-30s %lld/%lld | %lld/%lld\n",
              r.strategy.c_str(), r.C, r.time_ms, r.compute_only_ms, r.comm_only_ms, r.compute_only_ms / r.time_ms,
              overlap(r), r.compute_rate_ratio, double(r.peak_mem_bytes) / double(1 << 20),
              error_text(r.max_rel_error).c_str(), r.traffic_exact ? "yes" : "NO", fwd.c_str(), bwd.c_str(),
              static_cast<long long>(r.formula_forward.p2p_sent),
              static_cast<long long>(r.formula_forward.collective_sent),
              static_cast<long long>(r.formula_backward.p2p_sent),
              static_cast<long long>(r.formula_backward.collective_sent));
  if (const std::optional<DocumentRow>& d = r.documents) {
    std::printf("  attention blocks: packed %.1f ms, full causal %.1f ms: time %.3f / work %.3f = %.2f (%s %.2f; "
                "single iterations %.2f..%.2f); whole call: packed %.1f ms, full causal %.1f ms, time %.3f / work = "
                "%.2f; imbalance: token zigzag %.1f%%, balanced %.1f%% (%d chunks)%s\n",
                d->packed_compute_ms, d->causal_compute_ms, d->compute_ratio(), d->work_ratio, d->compute_per_work(),
                d->compute_per_work() <= kTimePerWorkTarget ? "within" : "OVER", kTimePerWorkTarget,
                d->compute_per_work_spread().first, d->compute_per_work_spread().second,
                d->packed_time_ms, d->causal_time_ms, d->time_ratio(), d->time_ratio() / d->work_ratio,
                100 * parallel::work_imbalance(d->zigzag_work), 100 * parallel::work_imbalance(d->balanced_work),
                d->chunks, d->work_exact ? "" : "; measured work differs from sp_rank_work_pairs");
  }
}

// ---- the command -----------------------------------------------------------------------------

// Problems that depend on the world size: one message, the same on every rank ("" when none).
std::string world_problem(const Options& o, const Problem& pr, int P, const std::vector<int>& team_sizes,
                          bool wallfacer) {
  for (int C : team_sizes) {
    if (C < 1 || P % (C * C) != 0) {
      return fmt::format("--C {}: WallFacer needs C² to divide P = {} (valid: {})", C, P,
                         fmt::join(comm::valid_team_sizes(P), ", "));
    }
  }
  try {
    parallel::check_sequence_length(pr.layout(), pr.N, P, 1);
    if (wallfacer) {
      for (int C : team_sizes) parallel::check_sequence_length(pr.layout(), pr.N, P, C);
    }
  } catch (const Error& e) {
    return fmt::format("--seq {}: {}", o.seq, e.what());
  }
  return "";
}

int run(const Options& o) {
  comm::Runtime& runtime = comm::Runtime::get();
  const int P = runtime.world_size();
  const bool root = runtime.rank() == 0;
  WF_USER_CHECK(o.documents.empty() || o.mask == "causal",
                "--documents compares a packed batch with the full causal mask; use --mask causal");
  DocumentBounds documents;
  if (!o.documents.empty()) documents.push_back(document_bounds_of(o.documents, o.seq));
  const Problem pr{o.batch, o.seq, o.heads, o.kv_heads > 0 ? o.kv_heads : o.heads, o.head_dim, o.mask == "causal",
                   o.dtype == "f64" ? DType::f64 : DType::f32, resolve_device_option(o.device), documents};
  const comm::GpuTransport transport = parse_transport_option(o.transport);
  std::vector<SpStrategy> strategies;
  for (const std::string& name : o.strategies) strategies.push_back(parallel::parse_sp_strategy(name));
  WF_USER_CHECK(std::count(strategies.begin(), strategies.end(), SpStrategy::ulysses_wallfacer) == 0,
                "bench attention: --strategies takes ring, ulysses, wallfacer; time ulysses-wallfacer layouts with "
                "`wallfacer bench layout` (parallel.U)");
  const bool wallfacer = std::count(strategies.begin(), strategies.end(), SpStrategy::wallfacer) > 0;
  const std::vector<int> team_sizes = o.team_sizes.empty() ? comm::valid_team_sizes(P) : o.team_sizes;
  if (const std::string problem = world_problem(o, pr, P, team_sizes, wallfacer); !problem.empty()) {
    if (root) print_error(problem);
    return kExitUsageError;
  }
  const comm::Placement placement = comm::parse_placement(o.placement);

  const Inputs in = global_inputs(pr);
  // Every rank gathers the results (a collective); only rank 0 computes the reference and compares.
  // The reference knows no documents (test_dist [sp_documents] checks packed results per document).
  const bool with_reference = pr.documents.empty() && double(pr.N) * double(pr.N) * double(pr.h) <= kMaxReferencePairs;
  std::optional<Reference> reference;
  if (with_reference && root) {
    reference = pr.dtype == DType::f64 ? reference_of<double>(pr, in) : reference_of<float>(pr, in);
  }
  const double rate = kernel_rate(pr, P, o.iters);
  if (root && !o.json) print_table_header(pr, P);

  std::vector<Row> rows;
  for (SpStrategy strategy : strategies) {
    if (strategy == SpStrategy::ulysses) {
      const std::string problem = parallel::ulysses_heads_problem(pr.h, pr.h_kv, P);
      if (!problem.empty()) {
        if (root) std::printf("ulysses: skipped: %s\n", problem.c_str());
        continue;
      }
    }
    const std::vector<int> Cs = strategy == SpStrategy::wallfacer ? team_sizes : std::vector<int>{1};
    for (int C : Cs) {
      comm::ParallelConfig config;
      config.sp = P;
      config.C = C;
      config.placement = placement;
      comm::CommGrid grid(comm::ProcessGrid(config, P, runtime.rank()));
      if (!pr.device.is_cpu()) {  // collective over the world
        const comm::TransportChoice choice = grid.use_device(pr.device, transport);
        if (root && !o.json && (rows.empty() || rows.back().transport_reason != choice.reason)) {
          std::printf("transport: %s\n", choice.reason.c_str());
        }
      }
      rows.push_back(measure(strategy, grid, pr, in, with_reference, reference, o.iters, rate));
      if (root) {
        if (o.json) print_json(rows.back(), pr);
        else print_table_row(rows.back());
        std::fflush(stdout);
      }
    }
  }
  if (o.check) {
    for (const Row& r : rows) {
      if (r.traffic_exact) continue;
      if (root) print_error(fmt::format("{} C = {}: measured traffic differs from traffic_model.h", r.strategy, r.C));
      return kExitRuntimeError;
    }
  }
  return kExitOk;
}

}  // namespace

void add_bench_attention_command(CLI::App& bench) {
  auto options = std::make_shared<Options>();
  CLI::App* command = bench.add_subcommand(
      "attention",
      "sequence-parallel attention fwd+bwd (ring, Ulysses, WallFacer per C): time, compute-only and "
      "communication-only time, their overlap, measured vs formula bytes, peak memory, error; run under mpirun "
      "(sp = world size), on the CPU or a device");
  command->footer(
      "Columns: time = one fwd+bwd call (the slowest rank, median); comp = the strategy's attention blocks alone on "
      "local data; comm = the same call with the blocks skipped (only messages and small merges); ovlp = comp / "
      "time; hidden = (comp + comm - time) / min(comp, comm), clamped to [0, 1]: the share of the shorter part that "
      "ran under the other (1 = fully hidden, 0 = serial); rate = the blocks' FLOP/s against one rank alone on one "
      "N/P block. On a device every time ends with synchronize(device): the device's time, not the host's.");
  command->add_option("--seq", options->seq, "global sequence length N")->check(positive());
  command->add_option("--batch", options->batch, "batch size B")->check(positive());
  command->add_option("--heads", options->heads, "query heads h")->check(positive());
  command->add_option("--kv-heads", options->kv_heads, "K/V heads (must divide --heads; default: --heads)")
      ->check(positive());
  command->add_option("--head-dim", options->head_dim, "head dimension d")->check(positive());
  command->add_option("--mask", options->mask, "causal (zigzag layout) or full (contiguous layout)")
      ->check(CLI::IsMember({"causal", "full"}));
  command->add_option("--strategies", options->strategies, "comma-separated: ring, ulysses, wallfacer")
      ->delimiter(',')
      ->check(CLI::IsMember({"ring", "ulysses", "wallfacer"}));
  command->add_option("--C", options->team_sizes, "comma-separated WallFacer team sizes (C² | P; default: all)")
      ->delimiter(',')
      ->check(positive());
  command->add_option("--iters", options->iters, "timed calls (the median is printed)")->check(positive());
  command->add_option("--dtype", options->dtype, "f32 or f64")->check(CLI::IsMember({"f32", "f64"}));
  command->add_option("--placement", options->placement, "WallFacer placement: collectives-intra or p2p-intra")
      ->check(CLI::IsMember({"collectives-intra", "p2p-intra"}));
  add_device_options(*command, options->device, options->transport, "where the inputs and the strategies' work run");
  command->add_option("--documents", options->documents,
                      "a packed batch beside the full causal mask, with the layout's work imbalance: document "
                      "lengths packed into --seq (4096,512,...; the list repeats, the last is cut) or COUNT:mixed / "
                      "COUNT:equal (e.g. 32:mixed)");
  command->add_flag("--json", options->json, "one JSON object per line per (strategy, C)");
  command->add_flag("--check", options->check, "exit 1 when a measured byte count differs from its formula");
  set_action(*command, [options] {
    const Options& o = *options;
    if (o.kv_heads > 0 && o.heads % o.kv_heads != 0) {
      print_error(fmt::format("--kv-heads {} must divide --heads {}", o.kv_heads, o.heads));
      return kExitUsageError;
    }
    // run_main: an error on one rank ends every rank (no rank waits forever in a collective).
    return comm::run_main(0, nullptr, [&] { return run(o); });
  });
}

}  // namespace wf::cli
