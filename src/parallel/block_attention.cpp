// Attention between token runs (block_attention.h): every (query run, key run) block is
// classified by block_mask and either skipped (never launched) or handed to the blocked kernels
// of kernels/cpu/attention.h with its global offsets.
//
// A run is a range of rows along the sequence dim of [B, n, ...] (dim 2 of lse [B, h, n]); for
// B > 1 or several runs those rows are strided, while the kernels want contiguous [B, len, ...]
// buffers. So each run that takes part in a computed block is copied out once (an O(n) copy
// next to O(n²) attention work) and results are copied back; a run that covers the whole
// tensor is used in place.
#include "wallfacer/parallel/block_attention.h"

#include <cstring>
#include <optional>
#include <type_traits>

#include "kernels/cpu/attention.h"
#include "wallfacer/core/error.h"

namespace wf::parallel {
namespace {

using kernels::cpu::AttentionShape;

// ---- run rows ------------------------------------------------------------------------------

std::int64_t product(const Shape& shape, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end; ++i) p *= shape[i];
  return p;
}

// Copies rows [src_start, src_start + len) of dim `dim` of src into rows [dst_start, ...) of dst
// (the other dims equal).
void copy_rows(const Tensor& src, std::int64_t src_start, Tensor& dst, std::int64_t dst_start, std::int64_t len,
               std::size_t dim) {
  const Shape& shape = src.shape();
  const std::int64_t outer = product(shape, 0, dim);
  const std::int64_t row_bytes =
      product(shape, dim + 1, shape.size()) * static_cast<std::int64_t>(dtype_size(src.dtype()));
  const std::int64_t n_src = shape[dim], n_dst = dst.shape()[dim];
  const auto* from = static_cast<const char*>(src.raw_data());
  auto* to = static_cast<char*>(dst.raw_data());
  for (std::int64_t o = 0; o < outer; ++o) {
    std::memcpy(to + (o * n_dst + dst_start) * row_bytes, from + (o * n_src + src_start) * row_bytes,
                static_cast<std::size_t>(len * row_bytes));
  }
}

// Rows [start, start + len) of dim `dim` as a contiguous tensor: `t` itself when that is all
// of it, else a copy.
Tensor run_rows(const Tensor& t, std::size_t dim, std::int64_t start, std::int64_t len) {
  if (start == 0 && len == t.shape()[dim]) return t;
  Shape shape = t.shape();
  shape[dim] = len;
  Tensor rows = Tensor::empty(shape, t.dtype());
  copy_rows(t, start, rows, 0, len, dim);
  return rows;
}

// Writes rows obtained from run_rows back (nothing to do when they were `t` itself).
void store_run_rows(Tensor& t, std::size_t dim, std::int64_t start, const Tensor& rows) {
  if (rows.is_same(t)) return;
  copy_rows(rows, 0, t, start, rows.shape()[dim], dim);
}

// ---- the block plan ------------------------------------------------------------------------

struct Block {
  std::size_t q_run, kv_run;
  BlockMask mask;  // full or causal: skipped blocks are not listed
};

struct Plan {
  std::vector<std::int64_t> q_starts, kv_starts;  // storage row of each run's first token
  std::vector<Block> blocks;                      // computed blocks, query run by query run
  BlockAttentionStats stats;
};

std::vector<std::int64_t> storage_starts(const std::vector<TokenRun>& runs) {
  std::vector<std::int64_t> starts;
  std::int64_t at = 0;
  for (const TokenRun& r : runs) {
    starts.push_back(at);
    at += r.length;
  }
  return starts;
}

Plan plan_blocks(const std::vector<TokenRun>& q_runs, const std::vector<TokenRun>& kv_runs, bool causal) {
  Plan plan{storage_starts(q_runs), storage_starts(kv_runs), {}, {}};
  for (std::size_t i = 0; i < q_runs.size(); ++i) {
    for (std::size_t j = 0; j < kv_runs.size(); ++j) {
      const BlockMask mask = block_mask(q_runs[i], kv_runs[j], causal);
      if (mask == BlockMask::skip) {
        ++plan.stats.blocks_skipped;
        continue;
      }
      plan.blocks.push_back({i, j, mask});
      ++plan.stats.blocks_computed;
      plan.stats.unmasked_pairs += unmasked_pairs({q_runs[i]}, {kv_runs[j]}, causal);
    }
  }
  return plan;
}

AttentionShape block_shape(const Tensor& q, const Tensor& k, const TokenRun& q_run, const TokenRun& kv_run,
                           BlockMask mask, double scale) {
  AttentionShape s;
  s.batch = q.size(0);
  s.q_len = q_run.length;
  s.kv_len = kv_run.length;
  s.heads = q.size(2);
  s.kv_heads = k.size(2);
  s.head_dim = q.size(3);
  s.causal = mask == BlockMask::causal;
  if (s.causal) {  // offsets only matter under the mask
    s.q_offset = q_run.start;
    s.kv_offset = kv_run.start;
  }
  s.scale = scale;
  return s;
}

// Lazily copied rows of the K/V runs (and their gradient accumulators): each run is copied at
// most once however many query runs meet it.
struct KvRunCache {
  const Tensor& source;
  const Plan& plan;
  const std::vector<TokenRun>& runs;
  std::vector<std::optional<Tensor>> rows = std::vector<std::optional<Tensor>>(runs.size());
  Tensor& get(std::size_t j) {
    if (!rows[j]) rows[j] = run_rows(source, 1, plan.kv_starts[j], runs[j].length);
    return *rows[j];
  }
  void store_back(Tensor& target) {
    for (std::size_t j = 0; j < rows.size(); ++j) {
      if (rows[j]) store_run_rows(target, 1, plan.kv_starts[j], *rows[j]);
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

void check_same(const char* what, const Tensor& t, const char* arg, const Shape& shape, DType dtype) {
  WF_CHECK(t.defined(), "{}: {} is undefined", what, arg);
  WF_CHECK(t.device().is_cpu(), "{}: {} must be a CPU tensor", what, arg);
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
  check_same(what, q, "q", q.shape(), q.dtype());
  check_same(what, k, "k", k.shape(), q.dtype());
  check_same(what, v, "v", k.shape(), q.dtype());
  WF_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3) && k.size(2) >= 1 && q.size(2) % k.size(2) == 0,
           "{}: q {} and k {} must share batch and head dim, with kv heads dividing heads", what,
           shape_str(q.shape()), shape_str(k.shape()));
  WF_CHECK(run_total(q_runs, what, "q_runs") == q.size(1),
           "{}: the query runs hold {} tokens but q {} has {}", what, run_total(q_runs, what, "q_runs"),
           shape_str(q.shape()), q.size(1));
  WF_CHECK(run_total(kv_runs, what, "kv_runs") == k.size(1), "{}: the key runs hold {} tokens but k {} has {}", what,
           run_total(kv_runs, what, "kv_runs"), shape_str(k.shape()), k.size(1));
}

Shape lse_shape(const Tensor& q) { return {q.size(0), q.size(2), q.size(1)}; }

// The dtype of o, lse and the gradients: the inputs' own, f32 for bf16 inputs.
DType accumulator_dtype(DType input) { return input == DType::bf16 ? DType::f32 : input; }

// Calls `body(In{}, T{})` with the input type and the accumulator type of `input`.
template <class Body>
void dispatch_block_types(DType input, Body&& body) {
  switch (input) {
    case DType::f32: return body(float{}, float{});
    case DType::f64: return body(double{}, double{});
    case DType::bf16: return body(bf16{}, float{});
    default: WF_FAIL("block attention: dtype {} is not supported", dtype_name(input));
  }
}

// The kernels for inputs of type In accumulating in T: bf16 inputs multiply in bf16 with f32
// accumulation (attention_forward_bf16), the others in their own type.
template <class In, class T>
void forward_kernel(const AttentionShape& s, const In* q, const In* k, const In* v, T* o, T* lse) {
  if constexpr (std::is_same_v<In, bf16>) {
    kernels::cpu::attention_forward_bf16(s, q, k, v, o, lse);
  } else {
    kernels::cpu::attention_forward<T>(s, q, k, v, o, lse);
  }
}

template <class In, class T>
void backward_kernel(const AttentionShape& s, const In* q, const In* k, const In* v, const T* o, const T* lse,
                     const In* d_o, T* dq, T* dk, T* dv, const T* d_lse) {
  if constexpr (std::is_same_v<In, bf16>) {
    kernels::cpu::attention_backward_bf16(s, q, k, v, o, lse, d_o, dq, dk, dv, /*accumulate=*/true, d_lse);
  } else {
    kernels::cpu::attention_backward<T>(s, q, k, v, o, lse, d_o, dq, dk, dv, /*accumulate=*/true, d_lse);
  }
}

}  // namespace

BlockAttentionStats block_attention_forward(const Tensor& q, const std::vector<TokenRun>& q_runs, const Tensor& k,
                                            const Tensor& v, const std::vector<TokenRun>& kv_runs, bool causal,
                                            double scale, Tensor& o, Tensor& lse) {
  constexpr const char* kWhat = "block_attention_forward";
  check_inputs(kWhat, q, q_runs, k, v, kv_runs);
  const DType acc = accumulator_dtype(q.dtype());
  check_same(kWhat, o, "o", q.shape(), acc);
  check_same(kWhat, lse, "lse", lse_shape(q), acc);
  const Plan plan = plan_blocks(q_runs, kv_runs, causal);
  dispatch_block_types(q.dtype(), [&](auto in_tag, auto acc_tag) {
    using In = decltype(in_tag);
    using T = decltype(acc_tag);
    KvRunCache k_rows{k, plan, kv_runs}, v_rows{v, plan, kv_runs};
    for (std::size_t b = 0; b < plan.blocks.size();) {
      const std::size_t i = plan.blocks[b].q_run;
      const std::int64_t start = plan.q_starts[i], len = q_runs[i].length;
      const Tensor q_r = run_rows(q, 1, start, len);
      Tensor o_r = run_rows(o, 1, start, len), lse_r = run_rows(lse, 2, start, len);
      Tensor o_i = Tensor::empty(o_r.shape(), dtype_v<T>), lse_i = Tensor::empty(lse_r.shape(), dtype_v<T>);
      for (; b < plan.blocks.size() && plan.blocks[b].q_run == i; ++b) {
        const std::size_t j = plan.blocks[b].kv_run;
        const AttentionShape s = block_shape(q, k, q_runs[i], kv_runs[j], plan.blocks[b].mask, scale);
        forward_kernel<In, T>(s, q_r.data<In>(), k_rows.get(j).template data<In>(), v_rows.get(j).template data<In>(),
                              o_i.data<T>(), lse_i.data<T>());
        kernels::cpu::attention_merge<T>(s.batch, s.q_len, s.heads, s.head_dim, o_r.data<T>(), lse_r.data<T>(),
                                         o_i.data<T>(), lse_i.data<T>());
      }
      store_run_rows(o, 1, start, o_r);
      store_run_rows(lse, 2, start, lse_r);
    }
  });
  return plan.stats;
}

BlockAttentionStats block_attention_backward(const Tensor& q, const std::vector<TokenRun>& q_runs, const Tensor& k,
                                             const Tensor& v, const std::vector<TokenRun>& kv_runs, bool causal,
                                             double scale, const Tensor& o, const Tensor& lse, const Tensor& d_o,
                                             const Tensor& d_lse, Tensor& dq, Tensor& dk, Tensor& dv) {
  constexpr const char* kWhat = "block_attention_backward";
  check_inputs(kWhat, q, q_runs, k, v, kv_runs);
  const DType acc = accumulator_dtype(q.dtype());
  check_same(kWhat, o, "o", q.shape(), acc);
  check_same(kWhat, lse, "lse", lse_shape(q), acc);
  check_same(kWhat, d_o, "d_o", q.shape(), q.dtype());
  if (d_lse.defined()) check_same(kWhat, d_lse, "d_lse", lse_shape(q), acc);
  check_same(kWhat, dq, "dq", q.shape(), acc);
  check_same(kWhat, dk, "dk", k.shape(), acc);
  check_same(kWhat, dv, "dv", k.shape(), acc);
  const Plan plan = plan_blocks(q_runs, kv_runs, causal);
  dispatch_block_types(q.dtype(), [&](auto in_tag, auto acc_tag) {
    using In = decltype(in_tag);
    using T = decltype(acc_tag);
    KvRunCache k_rows{k, plan, kv_runs}, v_rows{v, plan, kv_runs}, dk_rows{dk, plan, kv_runs},
        dv_rows{dv, plan, kv_runs};
    for (std::size_t b = 0; b < plan.blocks.size();) {
      const std::size_t i = plan.blocks[b].q_run;
      const std::int64_t start = plan.q_starts[i], len = q_runs[i].length;
      const Tensor q_r = run_rows(q, 1, start, len), o_r = run_rows(o, 1, start, len);
      const Tensor do_r = run_rows(d_o, 1, start, len), lse_r = run_rows(lse, 2, start, len);
      const Tensor dlse_r = d_lse.defined() ? run_rows(d_lse, 2, start, len) : Tensor();
      Tensor dq_r = run_rows(dq, 1, start, len);
      for (; b < plan.blocks.size() && plan.blocks[b].q_run == i; ++b) {
        const std::size_t j = plan.blocks[b].kv_run;
        const AttentionShape s = block_shape(q, k, q_runs[i], kv_runs[j], plan.blocks[b].mask, scale);
        backward_kernel<In, T>(s, q_r.data<In>(), k_rows.get(j).template data<In>(), v_rows.get(j).template data<In>(),
                               o_r.data<T>(), lse_r.data<T>(), do_r.data<In>(), dq_r.data<T>(),
                               dk_rows.get(j).template data<T>(), dv_rows.get(j).template data<T>(),
                               dlse_r.defined() ? dlse_r.data<T>() : nullptr);
      }
      store_run_rows(dq, 1, start, dq_r);
    }
    dk_rows.store_back(dk);
    dv_rows.store_back(dv);
  });
  return plan.stats;
}

}  // namespace wf::parallel
