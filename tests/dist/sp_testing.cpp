#include "sp_testing.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "parallel/attention_testing.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/comm/process_grid.h"
#include "wallfacer/comm/traffic.h"

namespace wf::test {

using parallel::Pass;
using parallel::SequenceLayout;
using parallel::SpStrategy;
using parallel::SpTraffic;

parallel::SequenceLayout SpCase::layout_or_default() const {
  return layout.value_or(causal ? SequenceLayout::zigzag : SequenceLayout::contiguous);
}

parallel::ElementBytes SpCase::bytes_or_default() const {
  if (bytes) return *bytes;
  const auto a = static_cast<std::int64_t>(dtype_size(dtype));
  const std::int64_t compute = dtype == DType::f64 ? 8 : 4;
  return {a, compute, compute};
}

double SpCaseResult::max_error() const { return std::max({error_o, error_lse, error_dq, error_dk, error_dv}); }

double sp_tolerance(DType dtype) { return dtype == DType::f64 ? 1e-10 : dtype == DType::f32 ? 1e-5 : 2e-2; }

namespace {

// The reference of reference_attention, recomputed for the inputs `r` holds now (rounded to
// another dtype, say) and a softmax scale (0: 1/sqrt(d)).
void recompute_reference(ReferenceAttention& r, bool causal, double scale) {
  kernels::cpu::AttentionShape s;
  s.batch = r.q.size(0);
  s.q_len = s.kv_len = r.q.size(1);
  s.heads = r.q.size(2);
  s.kv_heads = r.k.size(2);
  s.head_dim = r.q.size(3);
  s.causal = causal;
  s.scale = scale;
  const Tensor q = r.q.to(DType::f64), k = r.k.to(DType::f64), v = r.v.to(DType::f64);
  const Tensor d_o = r.d_o.to(DType::f64), d_lse = r.d_lse.to(DType::f64);
  kernels::cpu::attention_forward_reference<double>(s, q.data<double>(), k.data<double>(), v.data<double>(),
                                                    r.o.data<double>(), r.lse.data<double>());
  kernels::cpu::attention_backward_reference<double>(s, q.data<double>(), k.data<double>(), v.data<double>(),
                                                     d_o.data<double>(), r.dq.data<double>(), r.dk.data<double>(),
                                                     r.dv.data<double>(), d_lse.data<double>());
}

}  // namespace

ReferenceAttention sp_reference(const SpCase& c, double scale) {
  const bool narrow = c.dtype != DType::f64 && c.dtype != DType::f32;  // drawn in f32, rounded, recomputed
  ReferenceAttention r =
      reference_attention({c.B, c.N, c.h, c.h_kv, c.d}, c.causal, narrow ? DType::f32 : c.dtype, c.seed, c.lse_grad);
  if (narrow) {
    for (Tensor* t : {&r.q, &r.k, &r.v, &r.d_o, &r.d_lse}) *t = t->to(c.dtype);
  }
  if (narrow || scale != 0) recompute_reference(r, c.causal, scale);
  if (!c.doc_bounds.empty()) reference_attention_documents(r, c.causal, c.doc_bounds, scale);
  return r;
}

comm::CommGrid& sp_grid(int C, comm::Placement placement, int U, bool ulysses_inner) {
  static std::map<std::tuple<int, comm::Placement, int, bool>, std::unique_ptr<comm::CommGrid>> grids;
  std::unique_ptr<comm::CommGrid>& grid = grids[{C, placement, U, ulysses_inner}];
  if (!grid) {
    comm::ParallelConfig config;
    config.sp = runtime().world_size();
    config.C = C;
    config.placement = placement;
    config.U = U;
    config.ulysses_inner = ulysses_inner;
    grid = std::make_unique<comm::CommGrid>(comm::ProcessGrid(config, runtime().world_size(), runtime().rank()));
  }
  return *grid;
}

std::vector<double> max_over_world(std::vector<double> values) {
  Tensor t = Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())});
  runtime().world().all_reduce(t, comm::ReduceOp::max);
  return t.to_vector<double>();
}

namespace {

std::string str(const SpTraffic& t) {
  return fmt::format("{{p2p sent {} received {}, collectives sent {} received {}}}", t.p2p_sent, t.p2p_received,
                     t.collective_sent, t.collective_received);
}

std::string describe(const SpCase& c, int P) {
  return fmt::format("{} P = {} U = {} ({}) C = {} {} {} B = {} h = {} h_kv = {} d = {} N = {} {} on {}{}{}",
                     parallel::sp_strategy_name(c.strategy), P, c.U, c.ulysses_inner ? "inner" : "outer", c.C,
                     c.causal ? "causal" : "full",
                     parallel::sequence_layout_name(c.layout_or_default()), c.B, c.h, c.h_kv, c.d, c.N,
                     dtype_name(c.dtype), c.device.str(),
                     c.device.is_cpu() ? "" : fmt::format(" ({} transport)", comm::gpu_transport_name(c.transport)),
                     c.doc_bounds.empty() ? "" : fmt::format(", documents {}", c.doc_bounds));
}


void check_traffic(const char* what, const SpTraffic& got, const SpTraffic& expected) {
  INFO(what << ": measured " << str(got) << ", traffic model " << str(expected));
  CHECK(got == expected);
}

// Unmasked pairs a rank's forward must compute (sequence_layout.h's work functions), on the
// layout of `chunks` (null: the token layout).
std::int64_t expected_pairs(const SpCase& c, int P, int logical_index, const parallel::ChunkAssignment* chunks) {
  return parallel::sp_rank_work_pairs(c.strategy, c.layout_or_default(), c.N, P, c.C, c.U, logical_index, c.causal,
                                      c.doc_bounds, chunks);
}

// The busiest rank's work on the layout of `chunks`: what balancing packed documents evens out.
std::int64_t most_rank_work(const SpCase& c, int P, const parallel::ChunkAssignment* chunks) {
  std::int64_t most = 0;
  for (int l = 0; l < P; ++l) most = std::max(most, expected_pairs(c, P, l, chunks));
  return most;
}

// How many ranks compute each pair (for their share of the heads).
std::int64_t work_copies(const SpCase& c, int P) {
  return c.strategy == SpStrategy::ulysses ? P : c.strategy == SpStrategy::ulysses_wallfacer ? c.U : 1;
}

// Logical sp index of each physical sp index (the order the layouts are written in).
std::vector<int> logical_indices(const SpCase& c, const comm::CommGrid& grid) {
  std::vector<int> logical;
  for (int r = 0; r < grid.grid().group_size("sp"); ++r) {
    const bool wallfacer = c.strategy == SpStrategy::wallfacer || c.strategy == SpStrategy::ulysses_wallfacer;
    logical.push_back(wallfacer ? grid.grid().sp_logical_index(r) : r);
  }
  return logical;
}

}  // namespace

std::vector<std::int64_t> packed(std::int64_t N, const std::vector<std::int64_t>& lengths) {
  std::vector<std::int64_t> bounds{0};
  for (std::size_t i = 0; bounds.back() < N; ++i) {
    bounds.push_back(std::min(N, bounds.back() + lengths[i % lengths.size()]));
  }
  return bounds;
}

int expected_ring_hops(const SpCase& c, int P, Pass pass) {
  return parallel::sp_ring_hops(c.strategy, c.layout_or_default(), c.N, P, c.C, c.U, c.causal, c.doc_bounds, pass);
}

SpTraffic expected_sp_traffic(const SpCase& c, int P, int logical_index, Pass pass) {
  return parallel::sp_attention_traffic(
      c.strategy, {c.B, c.N, c.h, c.h_kv, c.d}, P, c.U, c.C, logical_index, pass, c.bytes_or_default(),
      c.keep_forward_kv ? parallel::BackwardKv::keep_forward : parallel::BackwardKv::redispatch,
      expected_ring_hops(c, P, pass));
}

SpTraffic expected_sp_traffic_total(const SpCase& c, int P, Pass pass) {
  SpTraffic total;
  for (int l = 0; l < P; ++l) total += expected_sp_traffic(c, P, l, pass);
  return total;
}

SpCaseResult run_sp_case(const SpCase& c) {
  const int P = runtime().world_size();
  INFO(describe(c, P));
  comm::CommGrid& grid = sp_grid(c.C, comm::Placement::collectives_intra, c.U, c.ulysses_inner);
  comm::Group& sp = grid.group("sp");
  const SequenceLayout layout = c.layout_or_default();
  const parallel::SpAttentionConfig config{c.strategy, layout, c.N, c.keep_forward_kv};
  // Packed documents on the zigzag: the layout balanced by their work, as the loader gives it.
  const parallel::SpShard shard = parallel::sp_shard(config, grid).for_documents(c.doc_bounds);
  const ReferenceAttention ref = sp_reference(c);
  const std::vector<std::int64_t> positions = parallel::run_positions(shard.runs());

  const std::shared_ptr<nn::AttentionStrategy> strategy = parallel::make_sp_attention(config, grid);
  if (!c.device.is_cpu()) grid.use_device(c.device, c.transport);
  Tensor q = shard.shard(ref.q).to(c.device), k = shard.shard(ref.k).to(c.device), v = shard.shard(ref.v).to(c.device);
  q.set_requires_grad();
  k.set_requires_grad();
  v.set_requires_grad();
  AttentionOptions options;
  options.causal = c.causal;
  options.doc_bounds = c.doc_bounds;

  const Tensor d_o = shard.shard(ref.d_o).to(c.device), d_lse = take_positions(ref.d_lse, 2, positions).to(c.device);
  comm::TrafficRegistry::instance().reset();
  const std::int64_t syncs_before = host_sync_count();
  const AttentionResult out = strategy->forward(q, k, v, options);
  const SpTraffic forward = parallel::measured_sp_traffic();
  comm::TrafficRegistry::instance().reset();
  autograd::backward({out.out, out.lse}, {d_o, d_lse});
  const std::int64_t host_syncs = host_sync_count() - syncs_before;
  const SpTraffic backward = parallel::measured_sp_traffic();

  SpCaseResult result;
  result.host_syncs = host_syncs;
  check_traffic("forward, this rank", forward, expected_sp_traffic(c, P, shard.logical_index, Pass::forward));
  check_traffic("backward, this rank", backward, expected_sp_traffic(c, P, shard.logical_index, Pass::backward));
  result.total_forward = parallel::sum_over_ranks(sp, forward);
  result.total_backward = parallel::sum_over_ranks(sp, backward);
  check_traffic("forward, summed over ranks", result.total_forward, expected_sp_traffic_total(c, P, Pass::forward));
  check_traffic("backward, summed over ranks", result.total_backward,
                expected_sp_traffic_total(c, P, Pass::backward));

  // Gather every rank's shard of the five results in one all-gather, and put each in place.
  const std::vector<int> logical = logical_indices(c, grid);
  std::vector<Tensor> local{out.out, out.lse, q.grad(), k.grad(), v.grad()};
  std::int64_t per_rank = 0;
  for (Tensor& t : local) {
    REQUIRE(t.defined());  // every rank fails here alike: the shapes are the same everywhere
    t = t.to(Device::cpu());
    per_rank += t.numel();
  }
  Tensor flat = Tensor::empty({per_rank}, c.dtype);
  std::int64_t at = 0;
  for (const Tensor& t : local) {
    flat.slice0(at, at + t.numel()).copy_(t.view({t.numel()}));
    at += t.numel();
  }
  const Tensor all = sp.all_gather(flat);
  std::vector<Tensor> global{Tensor::zeros(ref.q.shape(), c.dtype), Tensor::zeros(ref.d_lse.shape(), c.dtype),
                             Tensor::zeros(ref.q.shape(), c.dtype), Tensor::zeros(ref.k.shape(), c.dtype),
                             Tensor::zeros(ref.k.shape(), c.dtype)};
  for (int r = 0; r < P; ++r) {
    const std::vector<std::int64_t> theirs =
        parallel::run_positions(shard.of_rank(logical[static_cast<std::size_t>(r)]).runs());
    at = r * per_rank;
    for (std::size_t j = 0; j < local.size(); ++j) {
      const Tensor piece = all.slice0(at, at + local[j].numel()).view(local[j].shape());
      put_positions(global[j], j == 1 ? 2 : 1, theirs, piece);  // lse is [B, h, n]: sequence last
      at += local[j].numel();
    }
  }
  result.o = global[0];
  result.lse = global[1];
  result.dq = global[2];
  result.dk = global[3];
  result.dv = global[4];
  result.error_o = relative_error(result.o, ref.o);
  result.error_lse = relative_error(result.lse, ref.lse);
  result.error_dq = relative_error(result.dq, ref.dq);
  result.error_dk = relative_error(result.dk, ref.dk);
  result.error_dv = relative_error(result.dv, ref.dv);
  const double tolerance = sp_tolerance(c.dtype);
  CHECK(result.error_o <= tolerance);
  CHECK(result.error_lse <= tolerance);
  CHECK(result.error_dq <= tolerance);
  CHECK(result.error_dk <= tolerance);
  CHECK(result.error_dv <= tolerance);

  // Work: every rank's unmasked pairs against the layout's work functions.
  if (const auto* work = dynamic_cast<const parallel::SpAttentionWork*>(strategy.get())) {
    const parallel::BlockAttentionStats fwd = work->last_forward_work(), bwd = work->last_backward_work();
    // The backward revisits the forward's blocks, except WallFacer's (and the hybrid's WallFacer part).
    if (c.strategy != SpStrategy::wallfacer && c.strategy != SpStrategy::ulysses_wallfacer) CHECK(bwd == fwd);
    const Tensor mine = Tensor::from_vector(std::vector<std::int64_t>{fwd.unmasked_pairs}, {1});
    const std::vector<std::int64_t> pairs = sp.all_gather(mine).to_vector<std::int64_t>();
    result.forward_pairs.assign(static_cast<std::size_t>(P), 0);
    std::int64_t total = 0;
    for (int r = 0; r < P; ++r) {
      const int l = logical[static_cast<std::size_t>(r)];
      result.forward_pairs[static_cast<std::size_t>(l)] = pairs[static_cast<std::size_t>(r)];
      total += pairs[static_cast<std::size_t>(r)];
      INFO("forward work of logical rank " << l);
      CHECK(pairs[static_cast<std::size_t>(r)] == expected_pairs(c, P, l, shard.chunks.get()));
    }
    // Each pair of a document computed once per copy of the work, none across documents.
    if (!c.doc_bounds.empty()) CHECK(total == work_copies(c, P) * document_pairs(c.doc_bounds, c.causal));
    // The balanced layout: no rank busier than under the token zigzag.
    if (shard.chunks != nullptr) CHECK(most_rank_work(c, P, shard.chunks.get()) <= most_rank_work(c, P, nullptr));
  }
  return result;
}

bool bitwise_equal(const SpCaseResult& a, const SpCaseResult& b) {
  return mismatch(a.o, b.o).empty() && mismatch(a.lse, b.lse).empty() && mismatch(a.dq, b.dq).empty() &&
         mismatch(a.dk, b.dk).empty() && mismatch(a.dv, b.dv).empty();
}

SpCaseResult run_sp_case(SpStrategy strategy, int P, int C, bool causal, std::int64_t B, std::int64_t h,
                         std::int64_t h_kv, std::int64_t d, std::int64_t N, DType dtype) {
  REQUIRE(P == runtime().world_size());
  SpCase c;
  c.strategy = strategy;
  c.C = C;
  c.causal = causal;
  c.B = B;
  c.h = h;
  c.h_kv = h_kv;
  c.d = d;
  c.N = N;
  c.dtype = dtype;
  return run_sp_case(c);
}

}  // namespace wf::test
