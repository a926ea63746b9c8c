#include "kernels/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/softmax.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/threading.h"

namespace wf::kernels::cpu {
namespace {

// Tile sizes, measured single-threaded at head_dim 64 (docs/kernels-attention.md): a forward
// task owns kForwardRows query rows and streams kForwardKeys keys at a time; a backward task
// owns kBackwardKeys keys and streams kBackwardRows query rows at a time. Score tiles stay in L2
// (128 KiB forward, 32 KiB ×2 backward); 64-row backward tiles also hit OpenBLAS's
// small-matrix path, which skips packing.
constexpr std::int64_t kForwardRows = 128;
constexpr std::int64_t kForwardKeys = 256;
constexpr std::int64_t kBackwardRows = 64;
constexpr std::int64_t kBackwardKeys = 128;
// Where the rows of a tile stop seeing the same keys (the causal diagonal, a document's end) the
// tiles narrow: the forward computes the scores past what its first row sees kNarrowKeys at a
// time, each for the rows that see some of them, and the backward streams kNarrowRows query rows at a
// time over key tiles its rows see only in part. Only the visible triangle's staircase is then
// computed and masked, not the whole square around it: short documents (packed batches) are mostly
// diagonal, and the square cost them ~25% more than their visible pairs (docs/kernels-attention.md).
constexpr std::int64_t kNarrowKeys = 32;
constexpr std::int64_t kNarrowRows = 32;
// A forward tile is cut where a new document starts (its rows see other keys), unless it holds
// fewer rows than this: one-token documents would otherwise make one-row tiles.
constexpr std::int64_t kMinSegmentRows = 16;
// The backward pass may give extra dQ partial buffers to tasks that share query rows (see
// backward_chunks); this bounds the memory they take.
constexpr double kMaxPartialBytes = double(std::int64_t{1} << 30);

template <class T>
constexpr T kNegInf = -std::numeric_limits<T>::infinity();

// ---- GEMM ------------------------------------------------------------------------------
// Row-major C = alpha·op(A)·op(B) + beta·C on the calling thread: the tiles are parallelised with
// OpenMP, and gemm() inside a parallel region runs the process's default backend (oneDNN or
// OpenBLAS, kernels/cpu/gemm.h) on one thread. Leading dimensions address one head of [n, h, d].
template <class T>
void tile_gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
               std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  gemm<T>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
// bf16 operands, f32 result (the bf16 kernel: every dot product in bf16, accumulated in f32).
void tile_gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
               std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  gemm_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// A tile of the compute type T (P, dS) as a GEMM operand of the operands' type In: the tile
// itself when they agree, else rounded into `scratch` — the bf16 kernel multiplies P·V and
// dS·K in bf16, rounding P and dS as FlashAttention does on GPUs.
template <class In, class T>
const In* as_operand(const T* tile, std::int64_t n, std::vector<In>& scratch) {
  if constexpr (std::is_same_v<In, T>) {
    return tile;
  } else {
    for (std::int64_t i = 0; i < n; ++i) scratch[static_cast<std::size_t>(i)] = float_to_bf16(tile[i]);
    return scratch.data();
  }
}

// An operand element in the compute type: exact (every bf16 is a float).
inline float widen(bf16 x) { return bf16_to_float(x); }
template <class T>
T widen(T x) {
  return x;
}

// ---- float rows ------------------------------------------------------------------------------
// The exponentials are the largest cost after the GEMMs: the f32 rows use the SIMD primitives of
// kernels/cpu/softmax.h (compiled per ISA, kernels/cpu/simd.h).
float row_max(const float* x, std::int64_t n) { return row_max_f32(x, n); }
float exp_shifted_sum(float* x, std::int64_t n, float shift) { return exp_shifted_sum_f32(x, n, shift, x); }
float exp_bounded(float x) { return simd::exp_bounded<4>(simd::splat<4>(x))[0]; }

// f64 is the accuracy path (gradient checks), not the speed path: plain loops and the libm exp.
double exp_bounded(double x) { return std::exp(x); }
double row_max(const double* x, std::int64_t n) {
  double m = kNegInf<double>;
  for (std::int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
  return m;
}
double exp_shifted_sum(double* x, std::int64_t n, double shift) {
  double sum = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    x[j] = std::exp(x[j] - shift);
    sum += x[j];
  }
  return sum;
}

template <class In, class T>
T dot(const In* x, const T* y, std::int64_t n) {
  T sum = 0;
  for (std::int64_t j = 0; j < n; ++j) sum += T(widen(x[j])) * y[j];
  return sum;
}

template <class T>
void scale_row(T* x, std::int64_t n, T alpha) {
  for (std::int64_t j = 0; j < n; ++j) x[j] *= alpha;
}

template <class T>
void zero_row(T* x, std::int64_t n) {
  std::fill(x, x + n, T(0));
}

// ---- geometry and operands --------------------------------------------------------------
// Everything a tile needs: sizes, strides, the mask and the data pointers (null where a pass
// does not use them). T is the compute type (softmax, statistics, accumulators, O and the
// gradients), In the type of the GEMM operands Q, K, V and dO: T itself, or bf16 over float.
template <class T, class In = T>
struct Attention {
  AttentionShape s;
  std::int64_t group;                // query heads per kv head
  std::int64_t q_stride, kv_stride;  // elements between consecutive positions
  T scale;
  const In *q = nullptr, *k = nullptr, *v = nullptr, *d_o = nullptr;
  const T* lse = nullptr;

  explicit Attention(const AttentionShape& shape)
      : s(shape),
        group(shape.heads / shape.kv_heads),
        q_stride(shape.heads * shape.head_dim),
        kv_stride(shape.kv_heads * shape.head_dim),
        scale(T(attention_scale(shape))) {}

  std::int64_t q_at(std::int64_t b, std::int64_t i, std::int64_t h) const {
    return ((b * s.q_len + i) * s.heads + h) * s.head_dim;
  }
  std::int64_t kv_at(std::int64_t b, std::int64_t j, std::int64_t hk) const {
    return ((b * s.kv_len + j) * s.kv_heads + hk) * s.head_dim;
  }
  std::int64_t lse_at(std::int64_t b, std::int64_t h, std::int64_t i) const { return (b * s.heads + h) * s.q_len + i; }

  // The keys [begin, end) query row i of batch row b sees (kernel_args.h): a window of the block,
  // both ends non-decreasing in i.
  KeyRange keys(std::int64_t b, std::int64_t i) const { return attention_key_range(s, b, i); }
  // The rows [first, last) that see some key of [k0, k1): those with end > k0 and begin < k1, a
  // contiguous run because both ends are monotone.
  std::pair<std::int64_t, std::int64_t> rows_seeing(std::int64_t b, std::int64_t k0, std::int64_t k1) const {
    const auto first_row = [&](auto before) {  // the first row i for which before(keys(b, i)) fails
      std::int64_t lo = 0, hi = s.q_len;
      while (lo < hi) {
        const std::int64_t mid = lo + (hi - lo) / 2;
        if (before(keys(b, mid))) lo = mid + 1; else hi = mid;
      }
      return lo;
    };
    const std::int64_t first = first_row([&](const KeyRange& r) { return r.end <= k0; });
    const std::int64_t last = first_row([&](const KeyRange& r) { return r.begin < k1; });
    return {first, std::max(first, last)};
  }
};

// The visible columns [c0, c1) of a key range inside the tile [k0, k0 + kn).
inline std::pair<std::int64_t, std::int64_t> tile_columns(const KeyRange& r, std::int64_t k0, std::int64_t kn) {
  const std::int64_t c0 = std::clamp<std::int64_t>(r.begin - k0, 0, kn);
  return {c0, std::clamp<std::int64_t>(r.end - k0, c0, kn)};
}

// Turns a rows × kn score tile (leading dimension kn) into probabilities P = exp(s − shift_r)
// on each row's visible columns, 0 elsewhere; shift_r = −inf (a row that saw nothing) gives a
// zero row. keys[r]: row r's key range, k0 the tile's first key.
template <class T>
void probabilities(T* tile, std::int64_t rows, std::int64_t kn, const KeyRange* keys, std::int64_t k0,
                   const T* shift) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = tile + r * kn;
    auto [c0, c1] = tile_columns(keys[r], k0, kn);
    if (shift[r] == kNegInf<T>) c1 = c0;
    zero_row(row, c0);
    exp_shifted_sum(row + c0, c1 - c0, shift[r]);
    zero_row(row + c1, kn - c1);
  }
}

// ---- forward ----------------------------------------------------------------------------
template <class T, class In = T>
struct ForwardScratch {
  std::vector<T> scores, acc, max, sum;
  std::vector<In> p_in;  // P rounded to In (bf16 kernel only)
  std::vector<KeyRange> keys;
  explicit ForwardScratch(std::int64_t head_dim)
      : scores(kForwardRows * kForwardKeys),
        acc(kForwardRows * head_dim),
        max(kForwardRows),
        sum(kForwardRows),
        p_in(std::is_same_v<In, T> ? 0 : kForwardRows * kForwardKeys),
        keys(kForwardRows) {}
};

// Online softmax over the key tiles for query rows [i0, i0 + rows) of head h.
template <class T, class In>
void forward_rows(const Attention<T, In>& a, T* o, T* lse, std::int64_t b, std::int64_t h, std::int64_t i0,
                  std::int64_t rows, ForwardScratch<T, In>& w) {
  const std::int64_t d = a.s.head_dim;
  const std::int64_t hk = h / a.group;
  T* scores = w.scores.data();
  T* acc = w.acc.data();
  T* m = w.max.data();
  T* l = w.sum.data();
  KeyRange* keys = w.keys.data();
  std::fill(m, m + rows, kNegInf<T>);
  std::fill(l, l + rows, T(0));
  zero_row(acc, rows * d);
  for (std::int64_t r = 0; r < rows; ++r) keys[r] = a.keys(b, i0 + r);

  // The tile's rows see the keys [begin of the first, end of the last): nothing outside is
  // computed. The keys go in passes of up to kForwardKeys, each one online-softmax update per
  // row. Inside a pass the scores are computed wide up to what the first row still seeing them
  // sees; past it rows drop out one by one (the diagonal) and the scores narrow to kNarrowKeys
  // strips, each computed for its rows only (a staircase). The softmax then runs once per row
  // over the whole pass, not once per strip: on the diagonal of short documents the per-row
  // passes (max, rescale, exponentials of a few dozen keys) cost as much as the products.
  const std::int64_t key_begin = keys[0].begin, key_end = keys[rows - 1].end;
  std::int64_t first = 0, last = 0;  // the rows [first, last) that see some key of the pass
  for (std::int64_t k0 = key_begin; k0 < key_end;) {
    while (first < rows && keys[first].end <= k0) ++first;
    const std::int64_t kn = std::min(kForwardKeys, key_end - k0);
    while (last < rows && keys[last].begin < k0 + kn) ++last;
    const std::int64_t n = last - first;
    if (n <= 0) {
      k0 += kn;
      continue;
    }
    // Column strips [c, c + width) of the pass and the first row that sees each; every row from
    // it to `last` is computed. The wide strip is what row `first` sees of the pass (whole
    // strips of kNarrowKeys or more), the narrow ones follow.
    const auto for_each_strip = [&](auto&& strip) {
      const std::int64_t wide = std::clamp<std::int64_t>(keys[first].end - k0, 0, kn);
      std::int64_t c = 0, from = first;
      if (wide >= kNarrowKeys) {
        strip(c, wide, from);
        c = wide;
      }
      for (; c < kn; c += kNarrowKeys) {
        while (from < last && keys[from].end <= k0 + c) ++from;
        if (from < last) strip(c, std::min(kNarrowKeys, kn - c), from);
      }
    };
    for_each_strip([&](std::int64_t c, std::int64_t width, std::int64_t from) {
      tile_gemm(false, true, last - from, width, d, a.scale, a.q + a.q_at(b, i0 + from, h), a.q_stride,
                a.k + a.kv_at(b, k0 + c, hk), a.kv_stride, T(0), scores + (from - first) * kn + c, kn);
    });
    for (std::int64_t r = first; r < last; ++r) {
      T* row = scores + (r - first) * kn;
      const auto [c0, c1] = tile_columns(keys[r], k0, kn);
      zero_row(row, c0);
      if (c1 == c0) {  // this row sees none of these keys: contributes nothing
        zero_row(row + c0, kn - c0);
        continue;
      }
      const T m_new = std::max(m[r], row_max(row + c0, c1 - c0));
      const T rescale = exp_bounded(m[r] - m_new);  // m[r] = -inf (first visible pass) → 0
      l[r] = l[r] * rescale + exp_shifted_sum(row + c0, c1 - c0, m_new);
      zero_row(row + c1, kn - c1);
      m[r] = m_new;
      if (rescale != T(1)) scale_row(acc + r * d, d, rescale);
    }
    const In* p = as_operand(scores, n * kn, w.p_in);
    for_each_strip([&](std::int64_t c, std::int64_t width, std::int64_t from) {
      tile_gemm(false, false, last - from, d, width, T(1), p + (from - first) * kn + c, kn,
                a.v + a.kv_at(b, k0 + c, hk), a.kv_stride, T(1), acc + from * d, d);
    });
    k0 += kn;
  }

  for (std::int64_t r = 0; r < rows; ++r) {
    T* out = o + a.q_at(b, i0 + r, h);
    T& out_lse = lse[a.lse_at(b, h, i0 + r)];
    if (m[r] == kNegInf<T>) {  // no visible key: O = 0, lse = -inf by definition
      zero_row(out, d);
      out_lse = kNegInf<T>;
      continue;
    }
    const T inv = T(1) / l[r];
    const T* in = acc + r * d;
#pragma omp simd
    for (std::int64_t c = 0; c < d; ++c) out[c] = in[c] * inv;
    out_lse = m[r] + std::log(l[r]);
  }
}

// ---- backward ---------------------------------------------------------------------------
template <class T, class In = T>
struct BackwardScratch {
  std::vector<T> p, ds;
  std::vector<In> p_in, ds_in;  // P and dS rounded to In (bf16 kernel only)
  std::vector<KeyRange> keys;
  explicit BackwardScratch(std::int64_t /*head_dim*/)
      : p(kBackwardRows * kBackwardKeys),
        ds(kBackwardRows * kBackwardKeys),
        p_in(std::is_same_v<In, T> ? 0 : kBackwardRows * kBackwardKeys),
        ds_in(std::is_same_v<In, T> ? 0 : kBackwardRows * kBackwardKeys),
        keys(kBackwardRows) {}
};

// All contributions of key tile [k0, k0 + kn) of kv head hk: its dK, dV rows (written, or added
// when accumulating) and its share of dQ for every query head of the group (added into dq_out,
// which the caller owns exclusively for these rows and heads).
template <class T, class In>
void backward_key_tile(const Attention<T, In>& a, const T* delta, T* dq_out, T* dk, T* dv, bool accumulate,
                       std::int64_t b, std::int64_t hk, std::int64_t k0, std::int64_t kn, BackwardScratch<T, In>& w) {
  const std::int64_t d = a.s.head_dim;
  T* p = w.p.data();
  T* ds = w.ds.data();
  KeyRange* keys = w.keys.data();
  // The tile's dK, dV rows are this task's alone: the products add into them in place (written
  // from zero unless accumulating), so no tile-sized buffer is zeroed and copied back per key
  // tile. Starting from zero this gives the bits a zeroed buffer did; accumulating, the sum is
  // rounded per row tile into the running gradient.
  if (!accumulate) {
    for (std::int64_t j = 0; j < kn; ++j) {
      zero_row(dk + a.kv_at(b, k0 + j, hk), d);
      zero_row(dv + a.kv_at(b, k0 + j, hk), d);
    }
  }

  // Only the rows that see some of these keys, in tiles; a tile of rows computes just the columns
  // [c0, c1) its rows see, and narrows to kNarrowRows where its rows see the key tile in part.
  const auto [i_begin, i_end] = a.rows_seeing(b, k0, k0 + kn);
  for (std::int64_t i0 = i_begin; i0 < i_end;) {
    std::int64_t rows = std::min(kBackwardRows, i_end - i0);
    const KeyRange last = a.keys(b, i0 + rows - 1);
    const bool whole = last.begin <= k0 && a.keys(b, i0).end >= k0 + kn;  // every row sees every key
    if (!whole) rows = std::min(rows, kNarrowRows);
    for (std::int64_t r = 0; r < rows; ++r) keys[r] = a.keys(b, i0 + r);
    const std::int64_t c0 = tile_columns(keys[0], k0, kn).first, c1 = tile_columns(keys[rows - 1], k0, kn).second;
    const std::int64_t cn = c1 - c0;
    const In* k = a.k + a.kv_at(b, k0 + c0, hk);
    const In* v = a.v + a.kv_at(b, k0 + c0, hk);
    T* dk_cols = dk + a.kv_at(b, k0 + c0, hk);
    T* dv_cols = dv + a.kv_at(b, k0 + c0, hk);
    for (std::int64_t g = 0; g < a.group && cn > 0; ++g) {
      const std::int64_t h = hk * a.group + g;
      const In* q = a.q + a.q_at(b, i0, h);
      const In* d_o = a.d_o + a.q_at(b, i0, h);
      const T* lse = a.lse + a.lse_at(b, h, i0);
      const T* delta_rows = delta + a.lse_at(b, h, i0);

      tile_gemm(false, true, rows, cn, d, a.scale, q, a.q_stride, k, a.kv_stride, T(0), p, cn);  // S
      probabilities(p, rows, cn, keys, k0 + c0, lse);                                             // P
      tile_gemm(true, false, cn, d, rows, T(1), as_operand(p, rows * cn, w.p_in), cn, d_o, a.q_stride, T(1), dv_cols,
                a.kv_stride);                                                                               // dV += Pᵀ·dO
      tile_gemm(false, true, rows, cn, d, T(1), d_o, a.q_stride, v, a.kv_stride, T(0), ds, cn);  // dP = dO·Vᵀ
      for (std::int64_t r = 0; r < rows; ++r) {  // dS = scale·P∘(dP − D); masked P = 0 → dS = 0
        const T* p_row = p + r * cn;
        T* ds_row = ds + r * cn;
        const T delta_r = delta_rows[r];
#pragma omp simd
        for (std::int64_t c = 0; c < cn; ++c) ds_row[c] = a.scale * p_row[c] * (ds_row[c] - delta_r);
      }
      const In* ds_op = as_operand(ds, rows * cn, w.ds_in);
      tile_gemm(true, false, cn, d, rows, T(1), ds_op, cn, q, a.q_stride, T(1), dk_cols, a.kv_stride);  // dK += dSᵀ·Q
      tile_gemm(false, false, rows, d, cn, T(1), ds_op, cn, k, a.kv_stride, T(1), dq_out + a.q_at(b, i0, h),
                a.q_stride);  // dQ += dS·K
    }
    i0 += rows;
  }

}

// Backward tasks are (batch, kv head, chunk): a task owns every key tile of its chunk, so dK/dV
// rows have one writer, and it handles all query heads of its kv group. Its dQ contributions
// land in dQ itself for chunk 0 and in a private zeroed partial buffer for the others, summed
// in chunk order afterwards, so dQ is race-free and deterministic for a given thread count.
// Chunks beyond one exist only to keep the threads busy when batch·kv_heads does not divide
// well among them; each costs a dQ-sized buffer, so use the fewest that keep >= 85 % of the
// thread-rounds busy, within kMaxPartialBytes.
std::int64_t backward_chunks(const AttentionShape& s, std::int64_t key_tiles, std::size_t dq_bytes) {
  const std::int64_t threads = omp_in_parallel() ? 1 : std::int64_t{omp_get_max_threads()};
  const std::int64_t groups = s.batch * s.kv_heads;
  const auto affordable = static_cast<std::int64_t>(1 + kMaxPartialBytes / std::max(double(dq_bytes), 1.0));
  const std::int64_t max_chunks = std::max<std::int64_t>(1, std::min(key_tiles, affordable));
  for (std::int64_t chunks = 1; chunks < max_chunks; ++chunks) {
    const std::int64_t tasks = groups * chunks;
    const std::int64_t rounds = (tasks + threads - 1) / threads;
    if (double(tasks) >= 0.85 * double(rounds * threads)) return chunks;
  }
  return max_chunks;
}

// Threads cost more than they save on tiny blocks (tests, short ring steps): below about a
// quarter million multiply-adds of Q·Kᵀ the work stays on the calling thread.
bool worth_threading(const AttentionShape& s, std::int64_t tasks) {
  return tasks > 1 && s.batch * s.heads * s.q_len * s.kv_len * s.head_dim > (std::int64_t{1} << 18);
}

}  // namespace

// The forward's row tiles [i0, i0 + rows) of batch row b: kForwardRows rows, cut where a new
// document starts (its rows' keys begin elsewhere, and a tile computes every key of its rows'
// window) unless the tile would keep fewer than kMinSegmentRows rows.
template <class T, class In>
std::vector<std::pair<std::int64_t, std::int64_t>> forward_row_tiles(const Attention<T, In>& a, std::int64_t b) {
  std::vector<std::pair<std::int64_t, std::int64_t>> tiles;
  for (std::int64_t i0 = 0; i0 < a.s.q_len;) {
    std::int64_t rows = std::min(kForwardRows, a.s.q_len - i0);
    if (a.s.windows.ranges != nullptr) {
      const std::int64_t begin = a.keys(b, i0).begin;
      for (std::int64_t r = kMinSegmentRows; r < rows; ++r) {
        if (a.keys(b, i0 + r).begin != begin) {
          rows = r;
          break;
        }
      }
    }
    tiles.emplace_back(i0, rows);
    i0 += rows;
  }
  return tiles;
}

// ---- public -----------------------------------------------------------------------------

namespace {

template <class T, class In>
void forward_impl(const AttentionShape& shape, const In* q, const In* k, const In* v, T* o, T* lse) {
  check_attention_shape(shape, "attention_forward");
  check_attention_pointers(shape, "attention_forward", {q, o, lse}, {k, v});
  init_blas_threads();
  Attention<T, In> a(shape);
  a.q = q;
  a.k = k;
  a.v = v;

  // Tasks (batch row, row tile, head): the row tiles of every batch row, or one list for all
  // rows when they share their windows. Last tiles first: under a causal mask they see the most
  // keys, and starting the longest tasks first balances the dynamic schedule.
  struct RowTile {
    std::int64_t b, i0, rows;
  };
  std::vector<RowTile> tiles;
  const std::int64_t lists = shape.windows.ranges != nullptr && shape.windows.lists > 1 ? shape.batch : 1;
  for (std::int64_t list = 0; list < lists; ++list) {
    const std::vector<std::pair<std::int64_t, std::int64_t>> cut = forward_row_tiles(a, list);
    for (auto it = cut.rbegin(); it != cut.rend(); ++it)
      for (std::int64_t b = list; b < (lists == 1 ? shape.batch : list + 1); ++b) tiles.push_back({b, it->first, it->second});
  }
  const std::int64_t tasks = static_cast<std::int64_t>(tiles.size()) * shape.heads;
#pragma omp parallel if (worth_threading(shape, tasks))
  {
    ForwardScratch<T, In> scratch(shape.head_dim);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t t = 0; t < tasks; ++t) {
      const RowTile& tile = tiles[static_cast<std::size_t>(t / shape.heads)];
      forward_rows(a, o, lse, tile.b, t % shape.heads, tile.i0, tile.rows, scratch);
    }
  }
}

template <class T, class In>
void backward_impl(const AttentionShape& shape, const In* q, const In* k, const In* v, const T* o, const T* lse,
                   const In* d_o, T* dq, T* dk, T* dv, bool accumulate, const T* d_lse) {
  check_attention_shape(shape, "attention_backward");
  check_attention_pointers(shape, "attention_backward", {q, o, lse, d_o, dq}, {k, v, dk, dv});
  init_blas_threads();
  Attention<T, In> a(shape);
  a.q = q;
  a.k = k;
  a.v = v;
  a.lse = lse;
  a.d_o = d_o;

  const std::int64_t d = shape.head_dim;
  const std::int64_t q_rows = shape.batch * shape.q_len * shape.heads;  // rows of d elements
  const std::int64_t q_elems = q_rows * d;
  if (!accumulate) {
#pragma omp parallel for schedule(static) if (q_elems > (1 << 16))
    for (std::int64_t e = 0; e < q_elems; ++e) dq[e] = T(0);
  }
  // D = rowsum(dO∘O) − d_lse, once per query row, laid out like lse: dS = scale·P∘(dP − D)
  // then carries both the softmax term and lse's own gradient P·d_lse.
  std::vector<T> delta(static_cast<std::size_t>(q_rows));
#pragma omp parallel for schedule(static) if (q_rows > (1 << 12))
  for (std::int64_t r = 0; r < q_rows; ++r) {
    const std::int64_t h = r % shape.heads, i = (r / shape.heads) % shape.q_len, b = r / (shape.heads * shape.q_len);
    const std::int64_t at = a.lse_at(b, h, i);
    delta[at] = dot(d_o + r * d, o + r * d, d) - (d_lse ? d_lse[at] : T(0));
  }

  const std::int64_t key_tiles = (shape.kv_len + kBackwardKeys - 1) / kBackwardKeys;
  const std::int64_t chunks = backward_chunks(shape, key_tiles, std::size_t(q_elems) * sizeof(T));
  std::vector<T> partial_dq(static_cast<std::size_t>((chunks - 1) * q_elems), T(0));
  const std::int64_t groups = shape.batch * shape.kv_heads;
  const std::int64_t tasks = groups * chunks;
#pragma omp parallel if (worth_threading(shape, tasks))
  {
    BackwardScratch<T, In> scratch(d);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t t = 0; t < tasks; ++t) {
      const std::int64_t chunk = t / groups, b = (t % groups) / shape.kv_heads, hk = t % shape.kv_heads;
      T* dq_out = chunk == 0 ? dq : partial_dq.data() + (chunk - 1) * q_elems;
      // Key tiles dealt round-robin: under a causal mask early keys see more queries, so
      // striding spreads the work evenly over the chunks.
      for (std::int64_t tile = chunk; tile < key_tiles; tile += chunks) {
        const std::int64_t k0 = tile * kBackwardKeys;
        backward_key_tile(a, delta.data(), dq_out, dk, dv, accumulate, b, hk, k0,
                          std::min(kBackwardKeys, shape.kv_len - k0), scratch);
      }
    }
  }
  if (chunks > 1) {
#pragma omp parallel for schedule(static) if (q_elems > (1 << 16))
    for (std::int64_t e = 0; e < q_elems; ++e)
      for (std::int64_t c = 0; c + 1 < chunks; ++c) dq[e] += partial_dq[c * q_elems + e];
  }
  // kv_len == 0 leaves no task; dk/dv are then empty. q_len == 0 still runs every key tile,
  // which writes (or adds) zero gradients.
}

}  // namespace

template <class T>
void attention_forward(const AttentionShape& shape, const T* q, const T* k, const T* v, T* o, T* lse) {
  forward_impl<T, T>(shape, q, k, v, o, lse);
}

template <class T>
void attention_backward(const AttentionShape& shape, const T* q, const T* k, const T* v, const T* o, const T* lse,
                        const T* d_o, T* dq, T* dk, T* dv, bool accumulate, const T* d_lse) {
  backward_impl<T, T>(shape, q, k, v, o, lse, d_o, dq, dk, dv, accumulate, d_lse);
}

void attention_forward_bf16(const AttentionShape& shape, const bf16* q, const bf16* k, const bf16* v, float* o,
                            float* lse) {
  forward_impl<float, bf16>(shape, q, k, v, o, lse);
}

void attention_backward_bf16(const AttentionShape& shape, const bf16* q, const bf16* k, const bf16* v, const float* o,
                             const float* lse, const bf16* d_o, float* dq, float* dk, float* dv, bool accumulate,
                             const float* d_lse) {
  backward_impl<float, bf16>(shape, q, k, v, o, lse, d_o, dq, dk, dv, accumulate, d_lse);
}

template <class T>
void attention_merge(std::int64_t batch, std::int64_t q_len, std::int64_t heads, std::int64_t head_dim, T* o, T* lse,
                     const T* o_i, const T* lse_i) {
  WF_CHECK(batch >= 0 && q_len >= 0 && heads >= 1 && head_dim >= 1,
           "attention_merge: batch {}, q_len {} must be >= 0 and heads {}, head_dim {} >= 1", batch, q_len, heads,
           head_dim);
  const std::int64_t rows = batch * q_len * heads;
  if (rows > 0) WF_CHECK(o && lse && o_i && lse_i, "attention_merge: null pointer for {} rows", rows);
#pragma omp parallel for schedule(static) if (rows * head_dim > (1 << 16))
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t h = r % heads, i = (r / heads) % q_len, b = r / (heads * q_len);
    const std::int64_t at = (b * heads + h) * q_len + i;
    const T mine = lse[at], theirs = lse_i[at];
    if (theirs == kNegInf<T>) continue;  // the partial saw no key
    T* out = o + r * head_dim;
    const T* in = o_i + r * head_dim;
    if (mine == kNegInf<T>) {
      std::copy(in, in + head_dim, out);
      lse[at] = theirs;
      continue;
    }
    // Weights e^mine and e^theirs relative to the larger one: the exponent is <= 0, so nothing
    // overflows however far apart they are, and log1p keeps the smaller share's precision.
    const T hi = std::max(mine, theirs);
    const T ratio = std::exp(std::min(mine, theirs) - hi);
    const T w_small = ratio / (T(1) + ratio), w_big = T(1) / (T(1) + ratio);
    const T w_mine = mine >= theirs ? w_big : w_small;
    const T w_theirs = mine >= theirs ? w_small : w_big;
    for (std::int64_t c = 0; c < head_dim; ++c) out[c] = w_mine * out[c] + w_theirs * in[c];
    lse[at] = hi + std::log1p(ratio);
  }
}

#define WF_INSTANTIATE_ATTENTION(T)                                                                            \
  template void attention_forward<T>(const AttentionShape&, const T*, const T*, const T*, T*, T*);             \
  template void attention_backward<T>(const AttentionShape&, const T*, const T*, const T*, const T*, const T*, \
                                      const T*, T*, T*, T*, bool, const T*);                                   \
  template void attention_merge<T>(std::int64_t, std::int64_t, std::int64_t, std::int64_t, T*, T*, const T*, const T*);
WF_INSTANTIATE_ATTENTION(float)
WF_INSTANTIATE_ATTENTION(double)
#undef WF_INSTANTIATE_ATTENTION

}  // namespace wf::kernels::cpu
