#include "kernels/cpu/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace wf::kernels::cpu {
namespace {

// The probabilities P[i][j] of one (batch, head), row-major q_len × kv_len, with masked and
// fully-masked entries 0; lse_out[i] gets the row's log-sum-exp (-inf when nothing is visible).
template <class T>
std::vector<double> probabilities(const AttentionShape& s, const T* q, const T* k, std::int64_t b, std::int64_t h,
                                  double* lse_out) {
  const std::int64_t d = s.head_dim, hk = h / (s.heads / s.kv_heads);
  const double scale = attention_scale(s);
  std::vector<double> p(static_cast<std::size_t>(s.q_len * s.kv_len), 0.0);
  for (std::int64_t i = 0; i < s.q_len; ++i) {
    const T* qi = q + ((b * s.q_len + i) * s.heads + h) * d;
    double* row = p.data() + i * s.kv_len;
    auto visible = [&](std::int64_t j) {
      if (s.windows.ranges != nullptr) {
        const KeyRange& w = s.windows.ranges[(s.windows.lists == 1 ? 0 : b) * s.q_len + i];
        return w.begin <= j && j < w.end;
      }
      return !s.causal || s.kv_offset + j <= s.q_offset + i;
    };
    double max = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < s.kv_len; ++j) {
      if (!visible(j)) continue;
      const T* kj = k + ((b * s.kv_len + j) * s.kv_heads + hk) * d;
      double dot = 0;
      for (std::int64_t c = 0; c < d; ++c) dot += double(qi[c]) * double(kj[c]);
      row[j] = scale * dot;
      max = std::max(max, row[j]);
    }
    if (max == -std::numeric_limits<double>::infinity()) {  // nothing visible
      lse_out[i] = max;
      continue;
    }
    double sum = 0;
    for (std::int64_t j = 0; j < s.kv_len; ++j)
      if (visible(j)) sum += std::exp(row[j] - max);
    for (std::int64_t j = 0; j < s.kv_len; ++j) row[j] = visible(j) ? std::exp(row[j] - max) / sum : 0.0;
    lse_out[i] = max + std::log(sum);
  }
  return p;
}

}  // namespace

template <class T>
void attention_forward_reference(const AttentionShape& s, const T* q, const T* k, const T* v, double* o, double* lse) {
  check_attention_shape(s, "attention_forward_reference");
  const std::int64_t d = s.head_dim, group = s.heads / s.kv_heads;
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::vector<double> p = probabilities(s, q, k, b, h, lse + (b * s.heads + h) * s.q_len);
      for (std::int64_t i = 0; i < s.q_len; ++i)
        for (std::int64_t c = 0; c < d; ++c) {
          double sum = 0;
          for (std::int64_t j = 0; j < s.kv_len; ++j)
            sum += p[i * s.kv_len + j] * double(v[((b * s.kv_len + j) * s.kv_heads + h / group) * d + c]);
          o[((b * s.q_len + i) * s.heads + h) * d + c] = sum;
        }
    }
}

template <class T>
void attention_backward_reference(const AttentionShape& s, const T* q, const T* k, const T* v, const T* d_o, double* dq,
                                  double* dk, double* dv, const T* d_lse) {
  check_attention_shape(s, "attention_backward_reference");
  const std::int64_t d = s.head_dim, group = s.heads / s.kv_heads;
  const double scale = attention_scale(s);
  std::fill(dq, dq + s.batch * s.q_len * s.heads * d, 0.0);
  std::fill(dk, dk + s.batch * s.kv_len * s.kv_heads * d, 0.0);
  std::fill(dv, dv + s.batch * s.kv_len * s.kv_heads * d, 0.0);
  std::vector<double> lse(static_cast<std::size_t>(s.q_len));
  std::vector<double> dp(static_cast<std::size_t>(s.kv_len));
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::int64_t hk = h / group;
      auto q_at = [&](std::int64_t i) { return ((b * s.q_len + i) * s.heads + h) * d; };
      auto kv_at = [&](std::int64_t j) { return ((b * s.kv_len + j) * s.kv_heads + hk) * d; };
      const std::vector<double> p = probabilities(s, q, k, b, h, lse.data());
      for (std::int64_t i = 0; i < s.q_len; ++i) {
        const double* p_row = p.data() + i * s.kv_len;
        double p_dot_dp = 0;  // rowsum(P∘dP)
        for (std::int64_t j = 0; j < s.kv_len; ++j) {
          double sum = 0;
          for (std::int64_t c = 0; c < d; ++c) sum += double(d_o[q_at(i) + c]) * double(v[kv_at(j) + c]);
          dp[j] = sum;
          p_dot_dp += p_row[j] * sum;
        }
        const double g_lse = d_lse ? double(d_lse[(b * s.heads + h) * s.q_len + i]) : 0.0;
        for (std::int64_t j = 0; j < s.kv_len; ++j) {
          const double ds = p_row[j] * (dp[j] - p_dot_dp + g_lse);
          for (std::int64_t c = 0; c < d; ++c) {
            dv[kv_at(j) + c] += p_row[j] * double(d_o[q_at(i) + c]);
            dq[q_at(i) + c] += scale * ds * double(k[kv_at(j) + c]);
            dk[kv_at(j) + c] += scale * ds * double(q[q_at(i) + c]);
          }
        }
      }
    }
}

template void attention_forward_reference<float>(const AttentionShape&, const float*, const float*, const float*,
                                                 double*, double*);
template void attention_forward_reference<double>(const AttentionShape&, const double*, const double*, const double*,
                                                  double*, double*);
template void attention_backward_reference<float>(const AttentionShape&, const float*, const float*, const float*,
                                                  const float*, double*, double*, double*, const float*);
template void attention_backward_reference<double>(const AttentionShape&, const double*, const double*, const double*,
                                                   const double*, double*, double*, double*, const double*);

}  // namespace wf::kernels::cpu
