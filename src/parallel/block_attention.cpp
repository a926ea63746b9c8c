// Attention between token runs (block_attention.h): every (query run, key run) block is
// classified by block_mask and either skipped (never launched) or handed to the attention kernels
// of the tensors' device (kernels/backend.h) with its global offsets.
//
// A run is a range of rows along the sequence dim of [B, n, ...] (dim 2 of lse [B, h, n]); for
// B > 1 or several runs those rows are strided, while the kernels want contiguous [B, len, ...]
// buffers. So each run that takes part in a computed block is copied out once (an O(n) copy
// next to O(n²) attention work) and results are copied back; a run that covers the whole
// tensor is used in place. With packed documents the runs in ascending position order are one
// kernel call with each query's key window inside (src/ops/document_attention.h), so a layout's
// many chunks cost one call per K/V block, skipped when no query sees a key of it.
#include "wallfacer/parallel/block_attention.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>

#include "src/ops/common.h"
#include "src/ops/document_attention.h"
#include "wallfacer/core/error.h"

namespace wf::parallel {
namespace {

using kernels::AttentionShape;

std::atomic<int> skip_block_compute_scopes{0};  // detail::SkipBlockCompute's, process-wide

// The rows of a run, over every batch row (document_attention.h).
using ops::rows_of;
using ops::store_rows;

// ---- the block plan ------------------------------------------------------------------------

// Storage rows [row, row + length) that one kernel call takes on a side: one run, or with packed
// documents a maximal sequence of runs in ascending position order (all of a layout's runs), whose
// key windows the kernel takes inside the call.
struct Part {
  std::int64_t row = 0, length = 0;
  std::size_t first_run = 0, runs = 0;
};

std::vector<Part> parts_of(const std::vector<TokenRun>& runs, bool grouped) {
  std::vector<Part> parts;
  std::int64_t row = 0;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const bool ascending = r > 0 && runs[r].start >= runs[r - 1].start + runs[r - 1].length;
    if (!(grouped && ascending && !parts.empty())) parts.push_back({row, 0, r, 0});
    parts.back().length += runs[r].length;
    ++parts.back().runs;
    row += runs[r].length;
  }
  return parts;
}

struct Block {
  std::size_t q_part, kv_part;
  AttentionShape shape;  // the kernel call (skipped blocks are not listed)
};

struct Plan {
  std::vector<Part> q_parts, kv_parts;
  std::vector<Block> blocks;               // computed blocks, query part by query part
  std::deque<ops::KeyWindows> windows;     // packed blocks' shapes point into these
  BlockAttentionStats stats;
};

AttentionShape block_shape(const Tensor& q, const Tensor& k, std::int64_t q_len, std::int64_t kv_len, double scale) {
  AttentionShape s;
  s.batch = q.size(0);
  s.q_len = q_len;
  s.kv_len = kv_len;
  s.heads = q.size(2);
  s.kv_heads = k.size(2);
  s.head_dim = q.size(3);
  s.scale = scale;
  return s;
}

// Unpacked: one kernel call per (query run, key run) block the mask leaves, with its global
// offsets under the causal mask.
void plan_runs(Plan& plan, const Tensor& q, const Tensor& k, const std::vector<TokenRun>& q_runs,
               const std::vector<TokenRun>& kv_runs, bool causal, double scale) {
  for (std::size_t i = 0; i < q_runs.size(); ++i) {
    for (std::size_t j = 0; j < kv_runs.size(); ++j) {
      const BlockMask mask = block_mask(q_runs[i], kv_runs[j], causal);
      if (mask == BlockMask::skip) {
        ++plan.stats.blocks_skipped;
        continue;
      }
      AttentionShape s = block_shape(q, k, q_runs[i].length, kv_runs[j].length, scale);
      s.causal = mask == BlockMask::causal;
      if (s.causal) {  // offsets only matter under the mask
        s.q_offset = q_runs[i].start;
        s.kv_offset = kv_runs[j].start;
      }
      plan.blocks.push_back({i, j, s});
      ++plan.stats.blocks_computed;
      plan.stats.unmasked_pairs += unmasked_pairs({q_runs[i]}, {kv_runs[j]}, causal);
    }
  }
}

// Packed documents: one kernel call per (query part, key part) with the key windows of its
// documents inside, skipped when no query sees a key. The stats still count (query run, key run)
// blocks, computed when they hold a pair of one document (document_pairs), and the pairs.
void plan_documents(Plan& plan, const Tensor& q, const Tensor& k, const std::vector<TokenRun>& q_runs,
                    const std::vector<TokenRun>& kv_runs, bool causal, double scale, const DocumentBounds& documents) {
  for (const TokenRun& qr : q_runs) {
    for (const TokenRun& kr : kv_runs) {
      AttentionShape call = block_shape(q, k, qr.length, kr.length, scale);
      call.causal = causal;
      call.q_offset = qr.start;
      call.kv_offset = kr.start;
      ++(ops::document_pairs(call, documents) == 0 ? plan.stats.blocks_skipped : plan.stats.blocks_computed);
    }
  }
  const auto positions = [](const std::vector<TokenRun>& runs, const Part& part) {
    const auto first = runs.begin() + static_cast<std::ptrdiff_t>(part.first_run);
    return run_positions({first, first + static_cast<std::ptrdiff_t>(part.runs)});
  };
  std::vector<std::vector<std::int64_t>> kv_positions;
  for (const Part& part : plan.kv_parts) kv_positions.push_back(positions(kv_runs, part));
  for (std::size_t i = 0; i < plan.q_parts.size(); ++i) {
    const std::vector<std::int64_t> q_positions = positions(q_runs, plan.q_parts[i]);
    for (std::size_t j = 0; j < plan.kv_parts.size(); ++j) {
      ops::KeyWindows windows(q_positions, kv_positions[j], documents, causal);
      if (windows.pairs() == 0) continue;
      plan.stats.unmasked_pairs += windows.pairs();
      const AttentionShape s = block_shape(q, k, plan.q_parts[i].length, plan.kv_parts[j].length, scale);
      plan.blocks.push_back({i, j, plan.windows.emplace_back(std::move(windows)).applied_to(s)});
    }
  }
}

Plan plan_blocks(const Tensor& q, const Tensor& k, const std::vector<TokenRun>& q_runs,
                 const std::vector<TokenRun>& kv_runs, bool causal, double scale, const DocumentBounds& documents) {
  const bool packed = !documents.empty();
  Plan plan{parts_of(q_runs, packed), parts_of(kv_runs, packed), {}, {}, {}};
  if (packed) {
    plan_documents(plan, q, k, q_runs, kv_runs, causal, scale, documents);
  } else {
    plan_runs(plan, q, k, q_runs, kv_runs, causal, scale);
  }
  return plan;
}

// Lazily copied rows of the K/V parts (and their gradient accumulators): each part is copied at
// most once however many query parts meet it.
struct KvPartCache {
  const Tensor& source;
  const Plan& plan;
  std::vector<std::optional<Tensor>> rows = std::vector<std::optional<Tensor>>(plan.kv_parts.size());
  Tensor& get(std::size_t j) {
    if (!rows[j]) rows[j] = rows_of(source, 1, plan.kv_parts[j].row, plan.kv_parts[j].length);
    return *rows[j];
  }
  void store_back(Tensor& target) {
    for (std::size_t j = 0; j < rows.size(); ++j) {
      if (rows[j]) store_rows(target, 1, plan.kv_parts[j].row, *rows[j]);
    }
  }
};

// ---- argument checks -----------------------------------------------------------------------

std::int64_t run_total(const std::vector<TokenRun>& runs, const char* what, const char* arg) {
  std::int64_t total = 0;
  for (const TokenRun& r : runs) {
    WF_CHECK(r.start >= 0 && r.length >= 0, "{}: {} has a run [{}, {}) with a negative start or length", what, arg,
             r.start, r.start + r.length);
    total += r.length;
  }
  return total;
}

// t is `shape` of `dtype` on q's device.
void check_same(const char* what, const Tensor& t, const char* arg, const Shape& shape, DType dtype,
                const Tensor& q) {
  WF_CHECK(t.defined(), "{}: {} is undefined", what, arg);
  WF_CHECK(t.device() == q.device(), "{}: {} is on {} but q on {}; move it with .to(q.device())", what, arg,
           t.device().str(), q.device().str());
  WF_CHECK(t.shape() == shape && t.dtype() == dtype, "{}: {} must be {} {}, got {} {}", what, arg, dtype_name(dtype),
           shape_str(shape), dtype_name(t.dtype()), shape_str(t.shape()));
}

// q [B, nq, h, d] over q_runs, k = v [B, nk, h_kv, d] over kv_runs, one floating dtype.
void check_inputs(const char* what, const Tensor& q, const std::vector<TokenRun>& q_runs, const Tensor& k,
                  const Tensor& v, const std::vector<TokenRun>& kv_runs) {
  WF_CHECK(q.defined() && k.defined() && v.defined(), "{}: q, k and v must be defined", what);
  WF_CHECK(q.dim() == 4 && k.dim() == 4, "{}: q must be [B, n_q, h, d] and k, v [B, n_k, h_kv, d], got q {} and k {}",
           what, shape_str(q.shape()), shape_str(k.shape()));
  WF_CHECK(q.dtype() == DType::f32 || q.dtype() == DType::f64 || q.dtype() == DType::bf16,
           "{}: dtype {} is not supported (f32, f64 or bf16; convert with .to(DType::f32))", what,
           dtype_name(q.dtype()));
  check_same(what, k, "k", k.shape(), q.dtype(), q);
  check_same(what, v, "v", k.shape(), q.dtype(), q);
  WF_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3) && k.size(2) >= 1 && q.size(2) % k.size(2) == 0,
           "{}: q {} and k {} must share batch and head dim, with kv heads dividing heads", what,
           shape_str(q.shape()), shape_str(k.shape()));
  WF_CHECK(run_total(q_runs, what, "q_runs") == q.size(1),
           "{}: the query runs hold {} tokens but q {} has {}", what, run_total(q_runs, what, "q_runs"),
           shape_str(q.shape()), q.size(1));
  WF_CHECK(run_total(kv_runs, what, "kv_runs") == k.size(1), "{}: the key runs hold {} tokens but k {} has {}", what,
           run_total(kv_runs, what, "kv_runs"), shape_str(k.shape()), k.size(1));
}

// The boundaries must cover every position of the runs (this call sees only some of the sequence).
void check_documents(const char* what, const DocumentBounds& documents, const Tensor& q,
                     const std::vector<TokenRun>& q_runs, const std::vector<TokenRun>& kv_runs) {
  std::int64_t end = 0;
  for (const auto* runs : {&q_runs, &kv_runs}) {
    for (const TokenRun& r : *runs) end = std::max(end, r.start + r.length);
  }
  ops::check_document_bounds(what, documents, q.size(0), end, /*exact=*/false);
}

Shape lse_shape(const Tensor& q) { return {q.size(0), q.size(2), q.size(1)}; }

// The dtype of o, lse and the gradients: the inputs' own, f32 for bf16 inputs.
DType accumulator_dtype(DType input) { return input == DType::bf16 ? DType::f32 : input; }

}  // namespace

BlockAttentionStats block_attention_forward(const Tensor& q, const std::vector<TokenRun>& q_runs, const Tensor& k,
                                            const Tensor& v, const std::vector<TokenRun>& kv_runs, bool causal,
                                            double scale, Tensor& o, Tensor& lse, const DocumentBounds& documents) {
  constexpr const char* kWhat = "block_attention_forward";
  check_inputs(kWhat, q, q_runs, k, v, kv_runs);
  check_documents(kWhat, documents, q, q_runs, kv_runs);
  const DType acc = accumulator_dtype(q.dtype());
  check_same(kWhat, o, "o", q.shape(), acc, q);
  check_same(kWhat, lse, "lse", lse_shape(q), acc, q);
  if (detail::SkipBlockCompute::active()) return {};
  const Plan plan = plan_blocks(q, k, q_runs, kv_runs, causal, scale, documents);
  // bf16 inputs multiply in bf16 with f32 accumulation, the others in their own dtype.
  const ops::Kernels kern = ops::kernels_for(kWhat, {q, k, v, o, lse});
  KvPartCache k_rows{k, plan}, v_rows{v, plan};
  for (std::size_t b = 0; b < plan.blocks.size();) {
    const std::size_t i = plan.blocks[b].q_part;
    const std::int64_t start = plan.q_parts[i].row, len = plan.q_parts[i].length;
    const Tensor q_r = rows_of(q, 1, start, len);
    Tensor o_r = rows_of(o, 1, start, len), lse_r = rows_of(lse, 2, start, len);
    Tensor o_i = Tensor::empty(o_r.shape(), acc, kern.device());
    Tensor lse_i = Tensor::empty(lse_r.shape(), acc, kern.device());
    for (; b < plan.blocks.size() && plan.blocks[b].q_part == i; ++b) {
      const std::size_t j = plan.blocks[b].kv_part;
      const AttentionShape& s = plan.blocks[b].shape;
      kern->attention_forward(kern.stream, q.dtype(), s, q_r.raw_data(), k_rows.get(j).raw_data(),
                              v_rows.get(j).raw_data(), o_i.raw_data(), lse_i.raw_data());
      kern->attention_merge(kern.stream, acc, s.batch, s.q_len, s.heads, s.head_dim, o_r.raw_data(), lse_r.raw_data(),
                            o_i.raw_data(), lse_i.raw_data());
    }
    store_rows(o, 1, start, o_r);
    store_rows(lse, 2, start, lse_r);
  }
  return plan.stats;
}

BlockAttentionStats block_attention_backward(const Tensor& q, const std::vector<TokenRun>& q_runs, const Tensor& k,
                                             const Tensor& v, const std::vector<TokenRun>& kv_runs, bool causal,
                                             double scale, const Tensor& o, const Tensor& lse, const Tensor& d_o,
                                             const Tensor& d_lse, Tensor& dq, Tensor& dk, Tensor& dv,
                                             const DocumentBounds& documents) {
  constexpr const char* kWhat = "block_attention_backward";
  check_inputs(kWhat, q, q_runs, k, v, kv_runs);
  check_documents(kWhat, documents, q, q_runs, kv_runs);
  const DType acc = accumulator_dtype(q.dtype());
  check_same(kWhat, o, "o", q.shape(), acc, q);
  check_same(kWhat, lse, "lse", lse_shape(q), acc, q);
  check_same(kWhat, d_o, "d_o", q.shape(), q.dtype(), q);
  if (d_lse.defined()) check_same(kWhat, d_lse, "d_lse", lse_shape(q), acc, q);
  check_same(kWhat, dq, "dq", q.shape(), acc, q);
  check_same(kWhat, dk, "dk", k.shape(), acc, q);
  check_same(kWhat, dv, "dv", k.shape(), acc, q);
  if (detail::SkipBlockCompute::active()) return {};
  const Plan plan = plan_blocks(q, k, q_runs, kv_runs, causal, scale, documents);
  const ops::Kernels kern = ops::kernels_for(kWhat, {q, k, v, o, lse, d_o, d_lse, dq, dk, dv});
  KvPartCache k_rows{k, plan}, v_rows{v, plan}, dk_rows{dk, plan}, dv_rows{dv, plan};
  for (std::size_t b = 0; b < plan.blocks.size();) {
    const std::size_t i = plan.blocks[b].q_part;
    const std::int64_t start = plan.q_parts[i].row, len = plan.q_parts[i].length;
    const Tensor q_r = rows_of(q, 1, start, len), o_r = rows_of(o, 1, start, len);
    const Tensor do_r = rows_of(d_o, 1, start, len), lse_r = rows_of(lse, 2, start, len);
    const Tensor dlse_r = d_lse.defined() ? rows_of(d_lse, 2, start, len) : Tensor();
    Tensor dq_r = rows_of(dq, 1, start, len);
    for (; b < plan.blocks.size() && plan.blocks[b].q_part == i; ++b) {
      const std::size_t j = plan.blocks[b].kv_part;
      const AttentionShape& s = plan.blocks[b].shape;
      kern->attention_backward(kern.stream, q.dtype(), s, q_r.raw_data(), k_rows.get(j).raw_data(),
                               v_rows.get(j).raw_data(), o_r.raw_data(), lse_r.raw_data(), do_r.raw_data(),
                               dq_r.raw_data(), dk_rows.get(j).raw_data(), dv_rows.get(j).raw_data(),
                               /*accumulate=*/true, dlse_r.defined() ? dlse_r.raw_data() : nullptr);
    }
    store_rows(dq, 1, start, dq_r);
  }
  dk_rows.store_back(dk);
  dv_rows.store_back(dv);
  return plan.stats;
}

namespace detail {

SkipBlockCompute::SkipBlockCompute() { ++skip_block_compute_scopes; }
SkipBlockCompute::~SkipBlockCompute() { --skip_block_compute_scopes; }
bool SkipBlockCompute::active() { return skip_block_compute_scopes.load() > 0; }

}  // namespace detail

}  // namespace wf::parallel
