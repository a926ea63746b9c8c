// The device-independent halves of kernels/kernel_args.h: names and argument checks.
#include "kernels/kernel_args.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <utility>
#include <vector>

#include "wallfacer/core/error.h"

namespace wf::kernels {

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
  }
  return "unknown";
}

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::gelu: return "gelu";
    case UnaryOp::silu: return "silu";
    case UnaryOp::exp: return "exp";
    case UnaryOp::ln: return "ln";
    case UnaryOp::tanh: return "tanh";
  }
  return "unknown";
}

void check_attention_shape(const AttentionShape& s, const char* what) {
  WF_CHECK(s.batch >= 1 && s.heads >= 1 && s.kv_heads >= 1 && s.head_dim >= 1,
           "{}: batch {}, heads {}, kv_heads {}, head_dim {} must all be >= 1", what, s.batch, s.heads, s.kv_heads,
           s.head_dim);
  WF_CHECK(s.q_len >= 0 && s.kv_len >= 0, "{}: q_len {} and kv_len {} must be >= 0", what, s.q_len, s.kv_len);
  WF_CHECK(s.heads % s.kv_heads == 0,
           "{}: heads {} is not a multiple of kv_heads {} (grouped-query attention needs heads = kv_heads · group)",
           what, s.heads, s.kv_heads);
  WF_CHECK(s.q_offset >= 0 && s.kv_offset >= 0, "{}: q_offset {} and kv_offset {} are positions and must be >= 0", what,
           s.q_offset, s.kv_offset);
  WF_CHECK(std::isfinite(s.scale), "{}: scale {} must be finite (0 selects 1/sqrt(head_dim))", what, s.scale);
  WF_CHECK(s.heads * s.head_dim <= INT_MAX, "{}: heads·head_dim = {} exceeds the BLAS int range", what,
           s.heads * s.head_dim);
  WF_CHECK(s.windows.ranges == nullptr || s.windows.lists == 1 || s.windows.lists == s.batch,
           "{}: key windows hold {} lists for a batch of {}; give one list shared by every row or one per row", what,
           s.windows.lists, s.batch);
  for (std::int64_t r = 0; s.windows.ranges != nullptr && r < s.windows.lists; ++r) {
    const KeyRange* w = s.windows.ranges + r * s.q_len;
    for (std::int64_t i = 0; i < s.q_len; ++i) {
      const bool inside = 0 <= w[i].begin && w[i].begin <= w[i].end && w[i].end <= s.kv_len;
      const bool monotone = i == 0 || (w[i - 1].begin <= w[i].begin && w[i - 1].end <= w[i].end);
      WF_CHECK(inside && monotone,
               "{}: key window {} of list {} is [{}, {}){}; windows must lie in [0, kv_len = {}) and both ends must "
               "not decrease from row to row (positions in ascending order)",
               what, i, r, w[i].begin, w[i].end, i > 0 ? fmt::format(" after [{}, {})", w[i - 1].begin, w[i - 1].end) : "",
               s.kv_len);
    }
  }
}

double attention_scale(const AttentionShape& s) { return s.scale != 0 ? s.scale : 1.0 / std::sqrt(double(s.head_dim)); }

std::int64_t attention_pairs(const AttentionShape& s) {
  if (s.q_len <= 0 || s.kv_len <= 0) return 0;
  if (s.windows.ranges != nullptr) {  // each row's window, over the rows of every list
    std::int64_t total = 0;
    for (std::int64_t e = 0; e < s.windows.lists * s.q_len; ++e) total += s.windows.ranges[e].end - s.windows.ranges[e].begin;
    return total;
  }
  if (!s.causal) return s.q_len * s.kv_len;
  // Query q sees clamp(q − kv_offset + 1, 0, kv_len) keys: summed over x = shift .. shift + q_len − 1.
  const std::int64_t lo = s.q_offset - s.kv_offset + 1, hi = lo + s.q_len - 1, M = s.kv_len;
  std::int64_t total = 0;
  const std::int64_t ramp_lo = std::max<std::int64_t>(lo, 1), ramp_hi = std::min(hi, M);
  if (ramp_lo <= ramp_hi) total += (ramp_lo + ramp_hi) * (ramp_hi - ramp_lo + 1) / 2;
  const std::int64_t flat_lo = std::max(lo, M + 1);
  if (flat_lo <= hi) total += M * (hi - flat_lo + 1);
  return total;
}

void check_rope_shape(const RopeShape& s, const char* op) {
  WF_CHECK(s.batch >= 0 && s.tokens >= 0 && s.heads >= 0 && s.head_dim >= 0,
           "{}: sizes must be non-negative, got batch={} tokens={} heads={} head_dim={}", op, s.batch, s.tokens,
           s.heads, s.head_dim);
  WF_CHECK(s.head_dim % 2 == 0, "{}: head_dim {} is odd; rotary embedding rotates channel pairs (i, i + d/2), so "
           "the head width must be even", op, s.head_dim);
  WF_CHECK(std::isfinite(s.theta) && s.theta > 0, "{}: theta must be positive and finite, got {}", op, s.theta);
}

void check_qkv_rope_shape(const QkvRopeShape& s, const char* op) {
  WF_CHECK(s.groups >= 0 && s.group_size > 0,
           "{}: groups must be >= 0 and group_size (query heads per kv head) > 0, got groups={} group_size={}", op,
           s.groups, s.group_size);
  if (s.rotate) {
    check_rope_shape({s.batch, s.tokens, s.groups * (s.group_size + 1), s.head_dim, s.theta}, op);
  } else {
    WF_CHECK(s.batch >= 0 && s.tokens >= 0 && s.head_dim >= 0,
             "{}: sizes must be non-negative, got batch={} tokens={} head_dim={}", op, s.batch, s.tokens, s.head_dim);
  }
}

double clip_coefficient(double total_norm, double max_norm) {
  WF_CHECK(max_norm >= 0.0, "clip_coefficient: max_norm must be >= 0, got {}", max_norm);
  // A NaN norm yields NaN (as in PyTorch with error_if_nonfinite=False): std::min would hide it.
  const double coefficient = max_norm / (total_norm + 1e-6);
  return std::isnan(coefficient) ? coefficient : std::min(1.0, coefficient);
}

double ema_decay_at(double decay, std::int64_t earlier, bool warmup) {
  if (!warmup) return decay;
  const double n = static_cast<double>(std::max<std::int64_t>(earlier, 0));
  return std::min(decay, (1.0 + n) / (10.0 + n));
}

void check_adamw_tensors(const std::vector<AdamWTensor>& tensors, const char* who) {
  std::vector<std::pair<const std::int64_t*, std::size_t>> counts;
  counts.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    WF_CHECK(tensors[i].n >= 0, "{}: tensor {} has a negative element count {}", who, i, tensors[i].n);
    WF_CHECK(tensors[i].applied != nullptr,
             "{}: tensor {} has no count of applied updates (an i64 on the device is required)", who, i);
    counts.emplace_back(tensors[i].applied, i);
  }
  std::sort(counts.begin(), counts.end());
  for (std::size_t k = 1; k < counts.size(); ++k) {
    WF_CHECK(counts[k].first != counts[k - 1].first,
             "{}: tensors {} and {} share one count of applied updates; give each parameter its own", who,
             std::min(counts[k - 1].second, counts[k].second), std::max(counts[k - 1].second, counts[k].second));
  }
}

void check_tensor_spans(const std::vector<TensorSpan>& tensors, const char* who) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    WF_CHECK(tensors[i].n >= 0, "{}: tensor {} has a negative element count {}", who, i, tensors[i].n);
  }
}

void check_attention_pointers(const AttentionShape& shape, const char* what,
                              std::initializer_list<const void*> q_side, std::initializer_list<const void*> kv_side) {
  if (shape.q_len > 0) {
    for (const void* ptr : q_side) WF_CHECK(ptr != nullptr, "{}: null Q-side pointer with q_len = {}", what, shape.q_len);
  }
  if (shape.kv_len > 0) {
    for (const void* ptr : kv_side) {
      WF_CHECK(ptr != nullptr, "{}: null K/V-side pointer with kv_len = {}", what, shape.kv_len);
    }
  }
}

void check_adamw_params(const char* who, std::int64_t n, const AdamWParams& p) {
  WF_CHECK(n >= 0, "{}: element count must be non-negative, got {}", who, n);
  WF_CHECK(p.lr >= 0.0, "{}: learning rate must be >= 0, got lr={}", who, p.lr);
  WF_CHECK(p.eps >= 0.0, "{}: eps must be >= 0, got {}", who, p.eps);
  WF_CHECK(p.beta1 >= 0.0 && p.beta1 < 1.0 && p.beta2 >= 0.0 && p.beta2 < 1.0,
           "{}: betas must be in [0, 1), got beta1={} beta2={}", who, p.beta1, p.beta2);
  WF_CHECK(p.weight_decay >= 0.0, "{}: weight_decay must be >= 0, got {}", who, p.weight_decay);
}

}  // namespace wf::kernels
