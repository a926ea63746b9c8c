#pragma once
// What a kernel is asked to do, independent of the device that does it: the operation codes and
// shape descriptors every backend's kernel entry points take (kernels/backend.h), and the checks
// on them. The CPU kernels (kernels/cpu) and a CUDA backend read the same descriptors, so an op or
// a parallel strategy builds one without naming a backend.
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "src/core/host_device.h"

namespace wf::kernels {

// ---- elementwise -------------------------------------------------------------------------------
enum class BinaryOp { add, sub, mul, div };
const char* binary_op_name(BinaryOp op);

// Pointwise functions: y = f(x). unary_backward computes dx = dy·f'(x) from x for gelu and silu
// and from the output y for tanh (1 − y²); exp's and ln's backwards are ordinary products and
// quotients. GELU is the tanh approximation of GPT-2.
enum class UnaryOp { gelu, silu, exp, ln, tanh };
const char* unary_op_name(UnaryOp op);

// Where element k of a dropout input sits in the random stream of the whole tensor it is a slice
// of: rows of `block` elements, `stride` apart in the whole tensor, the first at `start` (a whole
// tensor is one run: block = stride = n, start 0). Dropout under tensor and sequence parallelism
// masks each rank's slice exactly as one process masks the whole.
struct DropoutLayout {
  std::uint64_t block = 1, stride = 1, start = 0;
  std::uint64_t whole_index(std::uint64_t k) const { return (k / block) * stride + start + k % block; }
};

// ---- attention ---------------------------------------------------------------------------------
// Layouts (row-major, no padding):
//   Q, O, dQ, dO : [batch, q_len,  heads,    head_dim]
//   K, V, dK, dV : [batch, kv_len, kv_heads, head_dim]
//   lse          : [batch, heads, q_len]      (natural log of the softmax denominator)
// With `causal`, key position kv_offset + j is visible to query position q_offset + i iff
// kv_offset + j <= q_offset + i (global positions, so ring attention passes another rank's block).
//
// Key windows (packed documents, as FlashAttention's varlen attention, and any rows whose
// positions are not one contiguous range): with `windows.ranges` set, query row i of batch row b
// sees exactly the keys [begin, end) of the call's kv rows that windows.ranges[r·q_len + i] gives
// (r = b, or 0 when windows.lists == 1: one list for every batch row), and `causal` and the
// offsets are not used. Both ends must be non-decreasing in i (what positions in ascending order
// give), so the rows of a tile see one window [begin of its first, end of its last) and a key tile
// is seen by one contiguous run of rows: what lets a blocked kernel skip whole tiles. The memory
// is the host's where a Backend entry point takes the shape (kernels/backend.h); a backend whose
// kernels read device memory copies the lists over itself. src/ops/document_attention.h builds
// them from positions and document boundaries.
struct KeyRange {
  std::int64_t begin = 0, end = 0;
};
struct AttentionWindows {
  const KeyRange* ranges = nullptr;  // null: the causal / full mask
  std::int64_t lists = 0;            // 1 or batch
};

struct AttentionShape {
  std::int64_t batch = 1, q_len = 0, kv_len = 0, heads = 1, kv_heads = 1, head_dim = 1;
  bool causal = false;
  std::int64_t q_offset = 0, kv_offset = 0;
  double scale = 0;  // 0 → 1/sqrt(head_dim)
  AttentionWindows windows{};
};

// The keys [begin, end) of the call's kv rows that query row i of batch row b sees (begin == end:
// none): its window, or the prefix the causal mask leaves at global positions (all keys without
// it). Plain C++ on purpose: the CPU and CUDA kernels both call it.
WF_HOST_DEVICE KeyRange attention_key_range(const AttentionShape& s, std::int64_t b, std::int64_t i) {
  if (s.windows.ranges != nullptr) return s.windows.ranges[(s.windows.lists == 1 ? 0 : b) * s.q_len + i];
  if (!s.causal) return {0, s.kv_len};
  const std::int64_t end = s.q_offset + i - s.kv_offset + 1;
  return {0, end < 0 ? 0 : end > s.kv_len ? s.kv_len : end};
}

// wf::Error unless the shape is usable: batch, heads, kv_heads, head_dim >= 1, q_len, kv_len
// >= 0, heads % kv_heads == 0, offsets >= 0, scale finite.
void check_attention_shape(const AttentionShape& shape, const char* what = "attention");
// wf::Error naming `what` when a pointer an attention call reads or writes is null while its
// side has rows: q_side for q_len > 0 (Q, O, lse, dO, dQ), kv_side for kv_len > 0 (K, V, dK, dV).
void check_attention_pointers(const AttentionShape& shape, const char* what,
                              std::initializer_list<const void*> q_side, std::initializer_list<const void*> kv_side);
// The scale actually applied: shape.scale, or 1/sqrt(head_dim) when it is 0.
double attention_scale(const AttentionShape& shape);
// The (query, key) pairs the call computes per batch row and head: every pair, or under the causal
// mask those with key position <= query position (the work counters of src/parallel count these).
// With windows: their lengths summed over the lists (one shared list counts once, one list per
// row counts every row's).
std::int64_t attention_pairs(const AttentionShape& shape);

// ---- rotary position embedding -----------------------------------------------------------------
struct RopeShape {
  std::int64_t batch = 0;
  std::int64_t tokens = 0;
  std::int64_t heads = 0;
  std::int64_t head_dim = 0;  // even
  double theta = 10000.0;     // > 0
};
// wf::Error naming `op` unless sizes are non-negative, head_dim is even and theta is positive
// and finite.
void check_rope_shape(const RopeShape& s, const char* op);

// The fused QKV projection's output split into heads, q and k rotated (kernels/cpu/qkv_rope.h).
// projected is [batch, tokens, groups, group_size + 2, head_dim]: each kv group's group_size query
// heads, then its key head, then its value head (SelfAttention's layout).
struct QkvRopeShape {
  std::int64_t batch = 0;
  std::int64_t tokens = 0;      // positions has one entry per token, shared by every batch row
  std::int64_t groups = 0;      // kv heads
  std::int64_t group_size = 0;  // query heads per kv head (G)
  std::int64_t head_dim = 0;    // even when rotating
  bool rotate = true;           // false: the plain split (positions unread, may be null)
  double theta = 10000.0;       // > 0
};
// wf::Error naming `op` unless sizes are non-negative, group_size is positive and, when rotating,
// head_dim is even and theta positive and finite (check_rope_shape's checks).
void check_qkv_rope_shape(const QkvRopeShape& s, const char* op);

// ---- optimizer ---------------------------------------------------------------------------------
struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  std::int64_t step = 1;  // 1-based count of updates including this one, for bias correction
};
// wf::Error naming `who` unless n >= 0 and the hyper-parameters pass torch.optim.AdamW's
// constructor checks (lr, eps, weight_decay >= 0; betas in [0, 1)). params.step is not checked.
void check_adamw_params(const char* who, std::int64_t n, const AdamWParams& p);
// The factor clip_grad_norm_ multiplies every gradient by: min(1, max_norm / (total_norm + 1e-6)).
double clip_coefficient(double total_norm, double max_norm);
// The exponential moving average AdamW keeps of a parameter (decay 0: none): after each applied
// update ema = d·ema + (1 − d)·param, d = ema_decay_at(decay, the updates before it, warmup).
struct EmaParams {
  double decay = 0.0;
  bool warmup = true;
};
// With the warm-up min(decay, (1 + earlier) / (10 + earlier)) (earlier < 0 counts as 0), else decay.
double ema_decay_at(double decay, std::int64_t earlier, bool warmup);

// ---- multi-tensor entries (Backend::adamw_update_multi, sum_of_squares_multi) ------------------
// A list of tensors a backend may update or reduce in one launch instead of one per tensor (a
// model has hundreds of parameters); the results are those of the single-tensor entry per tensor.
//
// One parameter of adamw_update_multi: n elements each of param, grad, exp_avg, exp_avg_sq and,
// when not null, ema (device memory of the list's dtype), with its own count of applied updates.
struct AdamWTensor {
  std::int64_t n = 0;
  void* param = nullptr;
  const void* grad = nullptr;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  void* ema = nullptr;               // nullable: no EMA kept for this parameter
  std::int64_t* applied = nullptr;   // one i64 on the device, this parameter's alone
};
// wf::Error naming `who` unless every n >= 0, every count is given and no two parameters share
// one (each count is read before any is incremented, which only distinct counts make the same
// as a loop of adamw_update).
void check_adamw_tensors(const std::vector<AdamWTensor>& tensors, const char* who);

// One input of sum_of_squares_multi: n elements at data (device memory of the list's dtype).
struct TensorSpan {
  const void* data = nullptr;
  std::int64_t n = 0;
};
// wf::Error naming `who` unless every n >= 0.
void check_tensor_spans(const std::vector<TensorSpan>& tensors, const char* who);

}  // namespace wf::kernels
