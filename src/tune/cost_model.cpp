// tune::predict_step: the cost model of tune/cost_model.h.
#include "wallfacer/tune/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "wallfacer/comm/process_grid.h"
#include "wallfacer/config/model_schema.h"
#include "wallfacer/core/error.h"
#include "wallfacer/models/model.h"
#include "wallfacer/train/step_traffic.h"
#include "wallfacer/tune/network.h"

namespace wf::tune {

double Prediction::memory_bytes() const {
  double sum = 0;
  for (const Term& t : memory) sum += t.value;
  return sum;
}

const Term& Prediction::dominant() const {
  WF_CHECK(!time.empty(), "Prediction::dominant: no time terms");
  return *std::max_element(time.begin(), time.end(), [](const Term& a, const Term& b) { return a.value < b.value; });
}

namespace {

using parallel::SpStrategy;
constexpr Primitive kGather = Primitive::all_gather, kScatter = Primitive::reduce_scatter;

// Exposed time of communication m scheduled beside compute c: what the overlap fraction does not hide.
double beside(double c, double m, double overlap) { return c + m - overlap * std::min(c, m); }

// The sizes one strategy (or one part of the hybrid) works on over P ranks, per rank
// (traffic_model.h's names).
struct CallSizes {
  double E = 0, E_kv = 0, R = 0;  // elements of a local q (and o), of a local k; lse values
  double h = 1, h_kv = 1;         // query and kv heads
  double a = 4, s = 4, p = 4;     // bytes: activations, statistics, partial sums
};

CallSizes sizes_of(const parallel::AttentionDims& d, int P, const parallel::ElementBytes& bytes) {
  const double n = static_cast<double>(d.seq_len) / P, B = static_cast<double>(d.batch);
  const double hd = static_cast<double>(d.head_dim);
  CallSizes z;
  z.h = static_cast<double>(d.heads);
  z.h_kv = static_cast<double>(d.kv_heads);
  z.E = B * n * z.h * hd;
  z.E_kv = B * n * z.h_kv * hd;
  z.R = B * n * z.h;
  z.a = static_cast<double>(bytes.activation);
  z.s = static_cast<double>(bytes.stats);
  z.p = static_cast<double>(bytes.partial);
  return z;
}

// This rank's kernel times around one attention call: the attention kernel forward and backward,
// and the QKV projection's forward GEMM (what WallFacer's Q and K gathers hide behind).
struct KernelTime {
  double forward = 0, backward = 0;
  double qkv_forward = 0;
};

// Time of one attention call, split into the kernel's work and the exposed communication, and
// the bytes each rank sent on each sp group kind.
struct CallTime {
  double compute = 0, exposed = 0;
};

class SpCall {
 public:
  // `dims`: the attention call of one rank's tp shard (heads / tp) over the whole sequence.
  SpCall(const comm::ProcessGrid& grid, const Network& net, const parallel::AttentionDims& dims,
         const parallel::ElementBytes& bytes, const KernelTime& kernel)
      : grid_(grid), net_(net), dims_(dims), bytes_(bytes), kernel_(kernel), world_(grid.world_size()) {
    for (const char* g : {"sp", "sp.team", "sp.ring", "sp.ulysses", "sp.wallfacer"}) {
      sent_[g].assign(static_cast<std::size_t>(world_), 0.0);
    }
  }

  // Forward then backward (replayed when `checkpointed`) of `strategy`.
  CallTime run(SpStrategy strategy, bool checkpointed) {
    const int P = grid_.config().sp, U = grid_.config().U;
    t_.compute = kernel_.forward + kernel_.backward;
    if (P == 1) return t_;
    switch (parallel::effective_sp_strategy(strategy, P, U)) {
      case SpStrategy::ring: ring(sizes_of(dims_, P, bytes_)); break;
      case SpStrategy::ulysses: ulysses("sp", sizes_of(dims_, P, bytes_), P, checkpointed); break;
      case SpStrategy::wallfacer: wallfacer("sp", sizes_of(dims_, P, bytes_), checkpointed); break;
      case SpStrategy::ulysses_wallfacer: {
        // The Ulysses all-to-alls over U ranks around WallFacer over P/U ranks on h/U heads.
        const parallel::UlyssesWallFacerDims parts = parallel::ulysses_wallfacer_dims(dims_, P, U);
        ulysses("sp.ulysses", sizes_of(parts.ulysses, U, bytes_), U, checkpointed);
        wallfacer("sp.wallfacer", sizes_of(parts.wallfacer, P / U, bytes_), checkpointed);
        break;
      }
    }
    return t_;
  }
  const std::map<std::string, std::vector<double>>& sent() const { return sent_; }

 private:
  // ---- the phases, each timed on every group at once and counted per rank -------------------
  double ring_collective(const char* kind, double bytes, int steps, Primitive primitive) {
    const RankGroups groups = grid_.all_groups(kind);
    for (const auto& g : groups) {
      if (g.size() > 1) for (int r : g) sent_[kind][static_cast<std::size_t>(r)] += bytes;
    }
    return net_.ring_seconds(groups, bytes, steps, primitive);
  }
  double all_to_all(const char* kind, double bytes) {
    const auto groups = grid_.all_groups(kind);
    for (const auto& g : groups) for (int r : g) sent_[kind][static_cast<std::size_t>(r)] += bytes;
    return net_.all_to_all_seconds(groups, bytes);
  }
  // Every rank sends `bytes` to peer(rank), counted on `kind` `times` times; the time of one.
  template <class Peer>
  double exchange(const char* kind, double bytes, Peer peer, int times = 1) {
    if (times <= 0) return 0;
    std::vector<int> to(static_cast<std::size_t>(world_));
    for (int r = 0; r < world_; ++r) {
      const int p = peer(r);
      to[static_cast<std::size_t>(r)] = p;
      if (p != r) sent_[kind][static_cast<std::size_t>(r)] += times * bytes;
    }
    return net_.exchange_seconds(to, bytes);
  }
  int ring_next(int r) const {  // ring attention: the next rank of the sp group
    const auto g = grid_.group_of("sp", r);
    const int i = grid_.coord_of("sp", r);
    return g[static_cast<std::size_t>((i + 1) % static_cast<int>(g.size()))];
  }
  double overlap() const { return net_.cluster().overlap; }

  // ---- ring attention: P blocks, P − 1 shifts of K, V (and dK, dV in the backward) ----------
  void ring(const CallSizes& z) {
    const int P = grid_.config().sp;
    const auto next = [&](int r) { return ring_next(r); };
    const double f = kernel_.forward / P, b = kernel_.backward / P;
    const double kv = 2 * z.E_kv * z.a, dkv = 2 * z.E_kv * z.p;
    const double fwd_shift = exchange("sp", kv, next, P - 1);
    const double bwd_shift = exchange("sp", kv + dkv, next, P - 1);
    const double home = exchange("sp", dkv, next);
    t_.exposed += (P - 1) * (beside(f, fwd_shift, overlap()) - f) + (P - 1) * (beside(b, bwd_shift, overlap()) - b) + home;
  }

  // ---- Ulysses over the P ranks of `kind`: all-to-alls in, local attention on h/P heads, out --
  void ulysses(const char* kind, const CallSizes& z, int P, bool checkpointed) {
    const double rho = std::max(1.0, static_cast<double>(P) / z.h_kv);
    const auto A = [P](double S) { return (P - 1) * (S / P); };
    const double q_in = A(z.E * z.a), kv_in = 2 * A(rho * z.E_kv * z.a), o_out = A(z.E * z.a), lse = A(z.R * z.s);
    double comm = all_to_all(kind, q_in + kv_in) + all_to_all(kind, o_out + lse);          // forward
    comm += all_to_all(kind, A(z.E * z.a) + lse) + all_to_all(kind, A(z.E * z.a) + kv_in);  // dO, d_lse in; dQ, dK, dV out
    if (checkpointed) comm += all_to_all(kind, q_in + kv_in) + all_to_all(kind, o_out + lse);  // the replay's
    t_.exposed += comm;
  }

  // ---- WallFacer (its dispatch over `dispatch`): team all-gathers, dispatch, G ring steps, team
  // reduce-scatter --------------------------------------------------------------------------
  void wallfacer(const char* dispatch, const CallSizes& z, bool checkpointed) {
    const comm::WallFacerLayout& w = grid_.wallfacer();
    const int C = w.team_size(), G = w.ring_size();
    const auto send_to = [&](int r) { return grid_.wallfacer_peers_of(r).initial_send; };
    const auto recv_from = [&](int r) { return grid_.wallfacer_peers_of(r).initial_recv; };
    const auto next = [&](int r) { return grid_.wallfacer_peers_of(r).ring_next; };
    const double a = z.a, s = z.s, p = z.p, E = z.E, Ekv = z.E_kv, R = z.R;
    const double ov = overlap();
    // Forward. The Q and K all-gathers hide behind the K and V projections (qkv_forward is the
    // whole QKV GEMM; two thirds of it come after the Q gather starts).
    const double gather_q = ring_collective("sp.team", (C - 1) * E * a, C - 1, kGather);
    const double gather_k = ring_collective("sp.team", (C - 1) * Ekv * a, C - 1, kGather);
    const double gather_v = ring_collective("sp.team", (C - 1) * Ekv * a, C - 1, kGather);
    double exposed = gather_q + gather_k + gather_v - ov * std::min(gather_q + gather_k, kernel_.qkv_forward * 2.0 / 3.0);
    const double kv_team = 2 * C * Ekv * a;
    exposed += exchange(dispatch, kv_team, send_to);
    const double f = kernel_.forward / G, b = kernel_.backward / G;
    const double shift = exchange("sp.ring", kv_team, next, G - 1);
    exposed += (G - 1) * (beside(f, shift, ov) - f);
    exposed += ring_collective("sp.team", (C - 1) * C * R * s, C - 1, kGather);  // the members' lse
    exposed += ring_collective("sp.team", (C - 1) * E * p, C - 1, kScatter);     // partial O, reduce-scattered
    // Backward: dO and D gathered (with the replay, q and lse too, and K/V re-gathered and
    // re-dispatched); the query bundle travels; dQ home; dK, dV back; the team's reduce-scatters.
    exposed += ring_collective("sp.team", (C - 1) * (E * a + R * s), C - 1, kGather);
    if (checkpointed) {
      exposed += ring_collective("sp.team", (C - 1) * (E * a + R * s), C - 1, kGather);
      exposed += ring_collective("sp.team", 2 * (C - 1) * Ekv * a, C - 1, kGather);
      exposed += exchange(dispatch, kv_team, send_to);
    }
    const double bundle = C * (2 * E * a + 2 * R * s + E * p);
    const double bundle_shift = exchange("sp.ring", bundle, next, G - 1);
    exposed += (G - 1) * (beside(b, bundle_shift, ov) - b);
    if (G > 1) exposed += exchange("sp.ring", C * E * p, next);  // dQ home
    exposed += exchange(dispatch, 2 * C * Ekv * p, recv_from);     // dK, dV to the K/V's origin
    exposed += ring_collective("sp.team", (C - 1) * (E * p + 2 * Ekv * p), C - 1, kScatter);
    t_.exposed += exposed;
  }

  const comm::ProcessGrid& grid_;
  const Network& net_;
  parallel::AttentionDims dims_;
  parallel::ElementBytes bytes_;
  KernelTime kernel_;
  int world_;
  CallTime t_;
  std::map<std::string, std::vector<double>> sent_;
};

// Everything predict_step derives from the config before timing it.
struct Shape {
  config::BlockShape blocks;
  double parameters = 0;
  bool causal = true;
  int dp = 1, tp = 1, pp = 1, sp = 1, v = 1;
  std::int64_t batch = 1, seq = 0, accum = 1;
  double tokens = 0;  // rows per rank per microbatch: B·(N/sp + extra rows)
  DType dtype = DType::f32;
  double a = 4;       // activation bytes
};

Shape shape_of(const config::RunConfig& c) {
  const config::ModelFacts facts = config::model_facts(c);
  Shape s;
  s.blocks = facts.blocks;
  WF_USER_CHECK(s.blocks.n_layer > 0 && s.blocks.d_model > 0 && s.blocks.n_head > 0,
                "wallfacer tune: model '{}' does not describe its blocks (config::ModelFacts::blocks), which the cost "
                "model needs; fill them in its schema's facts", c.model.name);
  s.parameters = facts.parameters;
  s.causal = facts.causal;
  const config::ParallelSection& p = c.parallel;
  s.dp = p.dp, s.tp = p.tp, s.pp = p.pp, s.sp = p.sp, s.v = p.pp > 1 ? p.pp_virtual : 1;
  s.batch = c.train.micro_batch_size;
  s.seq = c.train.seq_len;
  s.accum = config::grad_accum_steps(c);
  s.tokens = static_cast<double>(s.batch) * (static_cast<double>(s.seq) / s.sp + static_cast<double>(s.blocks.extra_rows));
  s.dtype = c.train.dtype;
  s.a = static_cast<double>(dtype_size(c.train.dtype));
  return s;
}

// FLOPs of the QKV projection, forward, per row (tensor parallelism splits them).
double qkv_flops_per_row(const Shape& s) {
  const config::BlockShape& b = s.blocks;
  const double d = static_cast<double>(b.d_model), hd = d / static_cast<double>(b.n_head);
  return 2.0 * d * static_cast<double>(b.n_head + 2 * b.n_kv_head) * hd / s.tp;
}

// FLOPs of one block's GEMMs, forward, per row: QKV, the projection and the feed-forward.
double block_matmul_flops_per_row(const Shape& s) {
  const double d = static_cast<double>(s.blocks.d_model);
  return qkv_flops_per_row(s) + 2.0 * (d * d + s.blocks.feed_forward_matrices * d * static_cast<double>(s.blocks.d_ff)) / s.tp;
}

// Bytes the elementwise ops of one block move per row, forward: the norms, residual adds and
// the activation function read and write their tensors once.
double block_elementwise_bytes_per_row(const Shape& s) {
  const double d = static_cast<double>(s.blocks.d_model), ff = static_cast<double>(s.blocks.d_ff);
  return s.a * (12 * d + 3 * ff * (s.blocks.feed_forward_matrices - 1) / s.tp);
}

models::DecoderOptions decoder_options_of(const Shape& s) {
  models::DecoderOptions o;
  o.n_layer = s.blocks.n_layer;
  o.n_head = s.blocks.n_head;
  o.n_kv_head = s.blocks.n_kv_head;
  o.d_model = s.blocks.d_model;
  o.d_ff = s.blocks.d_ff;
  o.vocab_size = std::max<std::int64_t>(1, s.blocks.head_width);
  o.feed_forward = s.blocks.feed_forward_matrices == 3 ? nn::FeedForwardKind::swiglu : nn::FeedForwardKind::mlp;
  o.checkpoint_attention = s.blocks.checkpoint_attention;
  return o;
}

// One rank's attention call: its tp shard's heads over the whole sequence.
parallel::AttentionDims attention_dims(const Shape& s) {
  const config::BlockShape& b = s.blocks;
  return {s.batch, s.seq, b.n_head / s.tp, b.n_kv_head / s.tp, b.d_model / b.n_head};
}

KernelTime kernel_time(const Shape& s, const DeviceSpec& device) {
  const parallel::AttentionDims d = attention_dims(s);
  // This rank's share of the visible (query, key) pairs: n queries against the whole sequence,
  // half of it under a causal mask (zigzag balances the halves over the ranks).
  const double n = static_cast<double>(s.seq) / s.sp, N = static_cast<double>(s.seq);
  const double pairs = static_cast<double>(d.batch * d.heads) * n * (s.causal ? (N + 1) / 2 : N);
  const double flops = 4.0 * static_cast<double>(d.head_dim) * pairs;
  return {flops / device.attention_flops(s.dtype, false), 2.5 * flops / device.attention_flops(s.dtype, true)};
}

// The buffers a strategy holds at the peak of one layer's attention beyond the local q, k, v.
double strategy_buffers(SpStrategy strategy, const CallSizes& z, int C) {
  const double A = z.E * z.a, Akv = z.E_kv * z.a, partial = z.E * z.p, partial_kv = z.E_kv * z.p;
  switch (strategy) {
    case SpStrategy::ring: return 2 * 2 * Akv + 2 * partial_kv * 2;  // K, V (and dK, dV) in flight, double-buffered
    case SpStrategy::ulysses: return 2 * (A + 2 * Akv) + 2 * A;      // head-sharded q, k, v, o and their gradients
    case SpStrategy::wallfacer:
      return C * (A + 2 * Akv)            // the team's q, k, v
             + 2 * C * Akv * 3            // kept, current and next K/V
             + C * partial                // partial O
             + 2 * C * (2 * A + partial)  // the query bundle, double-buffered
             + 2 * C * partial_kv;        // dK, dV partials
    case SpStrategy::ulysses_wallfacer: break;  // the sum of its parts (predict_step)
  }
  return 0;
}

void add(std::vector<Term>& terms, const std::string& name, double value) {
  if (value > 0) terms.push_back({name, value});
}

}  // namespace

std::map<std::string, std::vector<double>> sp_call_bytes_per_rank(const config::RunConfig& config) {
  const Shape s = shape_of(config);
  const int world = s.dp * s.tp * s.pp * s.sp;
  ClusterSpec one_node;
  one_node.nodes = 1;
  one_node.devices_per_node = world;
  one_node.device = device_preset("h100-80gb");
  one_node.intra_node.bandwidth_gbs = 100;  // any: only the bytes are read
  one_node.intra_node.latency_us = 1;
  const Network net(one_node);
  const comm::ProcessGrid grid(config.parallel.grid(), world, 0);
  SpCall call(grid, net, attention_dims(s), train::sp_element_bytes(config), kernel_time(s, one_node.device));
  call.run(config.parallel.sp_strategy, s.blocks.checkpoint_attention);
  return call.sent();
}

Prediction predict_step(const config::RunConfig& config, const ClusterSpec& cluster) {
  const Shape s = shape_of(config);
  const int world = s.dp * s.tp * s.pp * s.sp;
  WF_USER_CHECK(world <= cluster.devices(), "wallfacer tune: the layout needs {} ranks but cluster '{}' has {} devices "
                "({} nodes x {}); pass --world {} or fewer", world, cluster.name, cluster.devices(), cluster.nodes,
                cluster.devices_per_node, cluster.devices());
  const Network net(cluster);
  const DeviceSpec& dev = cluster.device;
  const comm::ProcessGrid grid(config.parallel.grid(), world, 0);
  const double ov = cluster.overlap;
  const double matmul_rate = dev.matmul_flops(s.dtype), mem_rate = dev.memory_gbs * 1e9;
  const bool ckpt = s.blocks.checkpoint_attention;
  const double recompute = ckpt ? 1.0 : 0.0;

  // ---- one microbatch through one stage -----------------------------------------------------
  // Blocks on the busiest stage (the last: it also runs the head), per model chunk.
  const double L = static_cast<double>(s.blocks.n_layer) / s.pp;
  const double rows = s.tokens;
  const double block_matmul = rows * block_matmul_flops_per_row(s) * (3.0 + recompute) / matmul_rate;
  const double block_elementwise = rows * block_elementwise_bytes_per_row(s) * (3.0 + recompute) / mem_rate;
  const double head = s.blocks.head_width > 0
                          ? 3.0 * 2.0 * rows * static_cast<double>(s.blocks.d_model) * static_cast<double>(s.blocks.head_width) /
                                s.tp / matmul_rate
                          : 0.0;
  KernelTime kernels = kernel_time(s, dev);
  kernels.qkv_forward = rows * qkv_flops_per_row(s) / matmul_rate;
  SpCall call(grid, net, attention_dims(s), train::sp_element_bytes(config), kernels);
  const CallTime attention = call.run(config.parallel.sp_strategy, ckpt);

  // tp: its all-reduces (train/step_traffic.h's count), exposed, over the tp groups.
  const models::DecoderOptions options = decoder_options_of(s);
  const train::StageShare stage_share{.blocks = static_cast<std::int64_t>(L), .embedding = s.pp == 1,
                                      .head = s.blocks.head_width > 0};
  const auto tp_bytes_step = static_cast<double>(train::tp_step_bytes(
      options, s.tp, static_cast<std::int64_t>(rows), s.accum, static_cast<std::int64_t>(s.a),
      config.parallel.tp_shard_activations, 0, stage_share));
  const double tp_calls_per_block = (s.blocks.feed_forward_matrices == 3 ? 2 : 1) + 1 + 2 * (1 + recompute);
  const double tp_calls = static_cast<double>(s.accum) * (L * tp_calls_per_block + 3);
  const double tp_time = s.tp > 1 ? net.ring_seconds(grid.all_groups("tp"), tp_bytes_step,
                                                     static_cast<int>(std::max(1.0, tp_calls * 2 * (s.tp - 1))),
                                                     Primitive::all_reduce)
                                  : 0.0;

  const double stage_matmul = L * block_matmul + head;
  const double stage_elementwise = L * block_elementwise;
  const double stage_attention = L * attention.compute;
  const double stage_sp = L * attention.exposed;
  const double microbatch = stage_matmul + stage_elementwise + stage_attention + stage_sp;

  // ---- the schedule of the step's microbatches -----------------------------------------------
  const double m = static_cast<double>(s.accum);
  double bubble = 0, pp_time = 0;
  if (s.pp > 1) {
    bubble = (s.pp - 1.0) / s.v * microbatch;  // (m·v + pp − 1)/v slots of one chunk each, less m·v
    const double hidden = rows * static_cast<double>(s.blocks.d_model) * s.a;
    std::vector<int> next(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {  // each stage to the next (the last sends nothing)
      const std::vector<int> pipeline = grid.group_of("pp", r);
      const int stage = grid.coord_of("pp", r);
      next[static_cast<std::size_t>(r)] = stage + 1 < s.pp ? pipeline[static_cast<std::size_t>(stage + 1)] : r;
    }
    pp_time = 2.0 * m * s.v * net.exchange_seconds(next, hidden);
  }

  // ---- gradient reduction over dp × sp, and the optimizer -------------------------------------
  const int replicas = s.dp * s.sp;
  const int zero = replicas > 1 ? config.parallel.zero : 0;
  const double shard = s.parameters / (static_cast<double>(s.tp) * s.pp);
  const double grad_bytes = shard * static_cast<double>(dtype_size(config.parallel.grad_reduce_dtype));
  const double R = replicas;
  // Per rank: ZeRO-0 all-reduces the gradients once; ZeRO 1 and 2 reduce-scatter them (ZeRO-2 in
  // every backward) and all-gather the f32 parameters after the update.
  const double all_reduce_bytes = 2 * (R - 1) / R * grad_bytes, scatter_bytes = (R - 1) / R * grad_bytes,
               gather_bytes = (R - 1) / R * shard * 4.0, scatters = zero == 2 ? m : 1.0;
  double dp_time = 0;
  if (replicas > 1) {
    const auto groups = grid.all_groups("dp_sp");
    const double last_backward = microbatch * 2.0 / 3.0;
    if (zero == 0) {
      const double t = net.ring_seconds(groups, all_reduce_bytes, 2 * (replicas - 1), Primitive::all_reduce);
      dp_time = t - ov * std::min(t, last_backward);
    } else {
      const double scatter = net.ring_seconds(groups, scatter_bytes, replicas - 1, kScatter);
      const double gather = net.ring_seconds(groups, gather_bytes, replicas - 1, kGather);
      dp_time = scatters * (scatter - ov * std::min(scatter, last_backward)) + gather;  // each beside its backward
    }
  }
  // AdamW reads the weight, gradient and two moments and writes three of them, in f32.
  const double optimizer_elements = zero >= 1 ? shard / R : shard;
  const double optimizer = optimizer_elements * 28.0 / mem_rate;

  Prediction out;
  add(out.time, "matmul", m * stage_matmul);
  add(out.time, "attention", m * stage_attention);
  add(out.time, "elementwise", m * stage_elementwise);
  add(out.time, "sp communication", m * stage_sp);
  add(out.time, "tp communication", tp_time);
  add(out.time, "pp bubble", bubble);
  add(out.time, "pp communication", pp_time);
  add(out.time, "dp communication", dp_time);
  add(out.time, "optimizer", optimizer);
  for (const Term& t : out.time) out.step_seconds += t.value;
  out.tokens_per_second =
      static_cast<double>(config::global_batch_sequences(config)) * static_cast<double>(s.seq) / out.step_seconds;

  // ---- memory per rank --------------------------------------------------------------------------
  const config::MemoryEstimate base = config::memory_per_rank(config);
  add(out.memory, "weights", base.weight_bytes);
  add(out.memory, "gradients", base.gradient_bytes);
  add(out.memory, "optimizer", base.optimizer_bytes);
  add(out.memory, "activations", base.activation_bytes);
  // The strategy's buffers at one layer's attention, in local-q units A = E·a.
  const parallel::ElementBytes element = train::sp_element_bytes(config);
  const parallel::AttentionDims dims = attention_dims(s);
  const CallSizes z = sizes_of(dims, s.sp, element);
  const int C = grid.wallfacer().team_size(), U = config.parallel.U;
  double buffers = z.E * z.a + 2 * z.E_kv * z.a;  // local q, k, v
  if (s.sp > 1) {
    const SpStrategy strategy = config.parallel.sp_strategy;
    const SpStrategy runs = parallel::effective_sp_strategy(strategy, s.sp, U);
    if (runs == SpStrategy::ulysses_wallfacer) {
      const parallel::UlyssesWallFacerDims parts = parallel::ulysses_wallfacer_dims(dims, s.sp, U);
      buffers += strategy_buffers(SpStrategy::ulysses, sizes_of(parts.ulysses, U, element), 1) +
                 strategy_buffers(SpStrategy::wallfacer, sizes_of(parts.wallfacer, s.sp / U, element), C);
    } else {
      buffers += strategy_buffers(runs, z, runs == SpStrategy::wallfacer ? C : 1);
    }
  }
  add(out.memory, "attention buffers", buffers);
  // The backward's recompute of one block: its full activations for the rows of one microbatch.
  const double d = static_cast<double>(s.blocks.d_model), ff = static_cast<double>(s.blocks.d_ff);
  add(out.memory, "recompute", ckpt ? rows * s.a * (6 * d + (s.blocks.feed_forward_matrices + 1) * ff / s.tp) : 0.0);

  // ---- traffic of rank 0 by group --------------------------------------------------------------
  const double calls = m * L;
  for (const auto& [kind, bytes] : call.sent()) out.traffic[kind] = calls * bytes[0];
  out.traffic["tp"] = tp_bytes_step;
  out.traffic["dp_sp"] = replicas > 1 ? (zero == 0 ? all_reduce_bytes : scatters * scatter_bytes + gather_bytes) : 0.0;
  return out;
}

}  // namespace wf::tune
