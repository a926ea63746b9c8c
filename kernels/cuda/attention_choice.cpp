// The per-shape choice between cuDNN's attention and the own kernels (attention_choice.h says how).
// Compiled, never run: no GPU was reachable when this was written (docs/gpu.md).
#include "kernels/cuda/attention_choice.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/elementwise.h"
#include "src/core/cuda/cuda_check.h"
#include "src/core/cuda/cuda_device.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"

namespace wf::kernels::cuda {

AttentionBackendSetting parse_attention_backend(const char* value) {
  const std::string_view v = value ? value : "";
  if (v.empty() || v == "auto") return AttentionBackendSetting::automatic;
  if (v == "own") return AttentionBackendSetting::own;
  if (v == "cudnn") return AttentionBackendSetting::cudnn;
  WF_FAIL("WF_ATTENTION_BACKEND={}: expected auto (measure both per shape), own or cudnn", v);
}

AttentionBackendSetting attention_backend_setting() {
  static const AttentionBackendSetting setting = parse_attention_backend(std::getenv("WF_ATTENTION_BACKEND"));
  return setting;
}

namespace {

struct Entry {
  AttentionChoice choice;
  bool use_cudnn = false;
};
struct Choices {
  std::mutex mutex;  // held through a first use's measurement
  std::map<CudnnPlanKey, Entry> entries;
};
Choices& choices() {
  static Choices* c = new Choices;  // never destroyed: read by `info` and by threads at exit
  return *c;
}

const __nv_bfloat16* bf16_in(const void* p) { return static_cast<const __nv_bfloat16*>(p); }

// Mean milliseconds of `runs` calls of run() on `stream`, timed by events (the host waits once).
template <class Run>
double time_ms(cudaStream_t stream, Run&& run, int runs = 3) {
  cudaEvent_t start = nullptr, stop = nullptr;
  WF_CUDA_CHECK(cudaEventCreate(&start));
  WF_CUDA_CHECK(cudaEventCreate(&stop));
  WF_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < runs; ++i) run();
  WF_CUDA_CHECK(cudaEventRecord(stop, stream));
  WF_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  WF_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return static_cast<double>(ms) / runs;
}

// Up to kSampled elements of a device tensor of `rows` rows of `row_len` f32 values: every step-th row,
// the same rows for the same sizes, so two tensors' samples line up.
constexpr std::int64_t kSampled = std::int64_t{1} << 20;
std::vector<float> sample_rows(const float* device, std::int64_t rows, std::int64_t row_len, cudaStream_t stream) {
  const std::int64_t max_rows = std::max<std::int64_t>(1, kSampled / row_len);
  const std::int64_t step = (rows + max_rows - 1) / max_rows;
  const std::int64_t taken = (rows + step - 1) / step;
  std::vector<float> host(static_cast<std::size_t>(taken * row_len));
  const std::size_t width = static_cast<std::size_t>(row_len) * sizeof(float);
  const std::size_t pitch = static_cast<std::size_t>(step) * width;
  if (pitch <= static_cast<std::size_t>(INT32_MAX)) {
    WF_CUDA_CHECK(cudaMemcpy2DAsync(host.data(), width, device, pitch, width, static_cast<std::size_t>(taken),
                                    cudaMemcpyDeviceToHost, stream));
  } else {  // a pitch past what cudaMemcpy2D takes: row by row
    for (std::int64_t r = 0; r < taken; ++r) {
      WF_CUDA_CHECK(cudaMemcpyAsync(host.data() + r * row_len, device + r * step * row_len, width,
                                    cudaMemcpyDeviceToHost, stream));
    }
  }
  WF_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

// One output of both: "" when cuDNN's is within max |cudnn − own| <= rtol·max |own| + atol, else why not.
struct Compared {
  const char* name;
  const float* own;
  const float* cudnn;
  std::int64_t rows, row_len;
  double rtol;
};
std::string mismatch(const Compared& c, cudaStream_t stream) {
  const std::vector<float> own = sample_rows(c.own, c.rows, c.row_len, stream);
  const std::vector<float> got = sample_rows(c.cudnn, c.rows, c.row_len, stream);
  double max_diff = 0, max_ref = 0;
  for (std::size_t i = 0; i < own.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(own[i])) return fmt::format("{}: NaN at sampled element {}", c.name, i);
    if (std::isnan(own[i])) continue;
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i]) - own[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(own[i])));
  }
  const double atol = 1e-3;
  if (max_diff <= c.rtol * max_ref + atol) return "";
  return fmt::format("{}: max |cudnn - own| {:.3g} > {} * max |own| {:.3g} + {}", c.name, max_diff, c.rtol, max_ref,
                     atol);
}
std::string first_mismatch(std::initializer_list<Compared> outputs, cudaStream_t stream) {
  for (const Compared& c : outputs) {
    std::string why = mismatch(c, stream);
    if (!why.empty()) return why;
  }
  return "";
}

void copy_out(const float* src, float* dst, std::int64_t n, bool accumulate, cudaStream_t stream) {
  if (accumulate) {
    launch_add_scaled<float>(stream, n, 1.0f, src, dst);
  } else {
    WF_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice,
                                  stream));
  }
}

// The verdict of a first use: cuDNN when it ran, matched and was faster.
Entry decide(const CudnnPlanKey& key, double own_ms, double cudnn_ms, const std::string& refusal) {
  Entry e;
  e.choice.shape = cudnn_plan_key_text(key);
  e.choice.own_ms = own_ms;
  e.choice.cudnn_ms = cudnn_ms;
  if (!refusal.empty()) {
    e.choice.which = "own";
    e.choice.reason = refusal;
    return e;
  }
  e.use_cudnn = cudnn_ms < own_ms;
  e.choice.which = e.use_cudnn ? "cudnn" : "own";
  e.choice.reason = "measured at first use, outputs matched; cuDNN's " + cudnn_plan_kind(key);
  log::info("attention (cuda): {} runs on {} (own {:.3f} ms, cuDNN {:.3f} ms)", e.choice.shape, e.choice.which, own_ms,
            cudnn_ms);
  return e;
}

// cuDNN's run at a first use: "" when it ran, else why not (no plan, or an error running it).
template <class Run>
std::string try_cudnn(Run&& run) {
  try {
    return run() ? "" : "cuDNN has no plan for this shape";
  } catch (const Error& e) {
    log::warn("attention (cuda): cuDNN disabled for a shape: {}", e.what());
    return std::string("cuDNN failed: ") + e.what();
  }
}

Entry measure_forward(const Stream& stream, const AttentionShape& s, const CudnnPlanKey& key, const void* q,
                      const void* k, const void* v, float* o, float* lse) {
  const cudaStream_t ns = native(stream);
  const std::int64_t n_o = s.batch * s.q_len * s.heads * s.head_dim, n_lse = s.batch * s.heads * s.q_len;
  detail::CudaScratch own_o(stream, n_o * sizeof(float)), own_lse(stream, n_lse * sizeof(float));
  detail::CudaScratch cudnn_o(stream, n_o * sizeof(float)), cudnn_lse(stream, n_lse * sizeof(float));
  const auto own = [&] {
    launch_attention_forward(ns, s, bf16_in(q), bf16_in(k), bf16_in(v), own_o.as<float>(), own_lse.as<float>());
  };
  const auto cudnn = [&] {
    return cudnn_attention_forward(stream, s, q, k, v, cudnn_o.as<float>(), cudnn_lse.as<float>());
  };
  own();  // warm-up
  const double own_ms = time_ms(ns, own);
  double cudnn_ms = -1;
  std::string refusal = try_cudnn(cudnn);  // builds the plan, and warms up
  if (refusal.empty()) {
    refusal = try_cudnn([&] {
      cudnn_ms = time_ms(ns, cudnn);
      return true;
    });
  }
  if (refusal.empty()) {
    refusal = first_mismatch({{"o", own_o.as<float>(), cudnn_o.as<float>(), n_o / s.head_dim, s.head_dim, 0.02},
                              {"lse", own_lse.as<float>(), cudnn_lse.as<float>(), n_lse / s.q_len, s.q_len, 0.02}},
                             ns);
    if (!refusal.empty()) {
      log::warn("attention (cuda): cuDNN disabled for {}: its results differ from the own kernel's ({})",
                cudnn_plan_key_text(key), refusal);
    }
  }
  copy_out(own_o.as<float>(), o, n_o, false, ns);
  copy_out(own_lse.as<float>(), lse, n_lse, false, ns);
  return decide(key, own_ms, cudnn_ms, refusal);
}

Entry measure_backward(const Stream& stream, const AttentionShape& s, const CudnnPlanKey& key, const void* q,
                       const void* k, const void* v, const float* o, const float* lse, const void* d_o, float* dq,
                       float* dk, float* dv, bool accumulate) {
  const cudaStream_t ns = native(stream);
  const std::int64_t n_q = s.batch * s.q_len * s.heads * s.head_dim;
  const std::int64_t n_kv = s.batch * s.kv_len * s.kv_heads * s.head_dim;
  const std::size_t q_bytes = n_q * sizeof(float), kv_bytes = n_kv * sizeof(float);
  detail::CudaScratch own_dq(stream, q_bytes), own_dk(stream, kv_bytes), own_dv(stream, kv_bytes);
  detail::CudaScratch cudnn_dq(stream, q_bytes), cudnn_dk(stream, kv_bytes), cudnn_dv(stream, kv_bytes);
  detail::CudaScratch minus_delta(stream, s.batch * s.heads * s.q_len * sizeof(float));
  const auto own = [&] {
    launch_attention_backward(ns, s, bf16_in(q), bf16_in(k), bf16_in(v), o, lse, bf16_in(d_o), own_dq.as<float>(),
                              own_dk.as<float>(), own_dv.as<float>(), false, nullptr, minus_delta.as<float>());
  };
  const auto cudnn = [&] {
    return cudnn_attention_backward(stream, s, q, k, v, o, lse, d_o, cudnn_dq.as<float>(), cudnn_dk.as<float>(),
                                    cudnn_dv.as<float>(), false);
  };
  own();
  const double own_ms = time_ms(ns, own);
  double cudnn_ms = -1;
  std::string refusal = try_cudnn(cudnn);
  if (refusal.empty()) {
    refusal = try_cudnn([&] {
      cudnn_ms = time_ms(ns, cudnn);
      return true;
    });
  }
  if (refusal.empty()) {
    const std::int64_t d = s.head_dim;
    refusal = first_mismatch({{"dq", own_dq.as<float>(), cudnn_dq.as<float>(), n_q / d, d, 0.05},
                              {"dk", own_dk.as<float>(), cudnn_dk.as<float>(), n_kv / d, d, 0.05},
                              {"dv", own_dv.as<float>(), cudnn_dv.as<float>(), n_kv / d, d, 0.05}},
                             ns);
    if (!refusal.empty()) {
      log::warn("attention (cuda): cuDNN disabled for {}: its gradients differ from the own kernel's ({})",
                cudnn_plan_key_text(key), refusal);
    }
  }
  copy_out(own_dq.as<float>(), dq, n_q, accumulate, ns);
  copy_out(own_dk.as<float>(), dk, n_kv, accumulate, ns);
  copy_out(own_dv.as<float>(), dv, n_kv, accumulate, ns);
  return decide(key, own_ms, cudnn_ms, refusal);
}

// The route of one call: run_cudnn() under a cached or forced choice of cuDNN, measure() at a
// first use under auto. True when the call's outputs were written.
template <class RunCudnn, class Measure>
bool route(const CudnnPlanKey& key, RunCudnn&& run_cudnn, Measure&& measure) {
  const AttentionBackendSetting setting = attention_backend_setting();
  if (setting == AttentionBackendSetting::own) return false;
  Choices& c = choices();
  std::unique_lock<std::mutex> lock(c.mutex);
  if (auto it = c.entries.find(key); it != c.entries.end()) {
    const bool use_cudnn = it->second.use_cudnn;
    lock.unlock();
    return use_cudnn && run_cudnn();
  }
  if (setting == AttentionBackendSetting::cudnn) {
    lock.unlock();
    const bool ran = run_cudnn();
    Entry e;
    e.choice = {cudnn_plan_key_text(key), ran ? "cudnn" : "own", -1, -1,
                ran ? "WF_ATTENTION_BACKEND=cudnn (unmeasured, unverified); cuDNN's " + cudnn_plan_kind(key)
                    : "cuDNN has no plan for this shape"};
    e.use_cudnn = ran;
    lock.lock();
    c.entries.emplace(key, e);
    return ran;
  }
  c.entries.emplace(key, measure());
  return true;
}

}  // namespace

bool attention_forward_by_choice(const Stream& stream, const AttentionShape& s, const void* q, const void* k,
                                 const void* v, float* o, float* lse) {
  if (!cudnn_attention_supported(s, DType::bf16)) return false;
  const CudnnPlanKey key = cudnn_plan_key(stream.device().index, s, false);
  return route(
      key, [&] { return cudnn_attention_forward(stream, s, q, k, v, o, lse); },
      [&] { return measure_forward(stream, s, key, q, k, v, o, lse); });
}

bool attention_backward_by_choice(const Stream& stream, const AttentionShape& s, const void* q, const void* k,
                                  const void* v, const float* o, const float* lse, const void* d_o, float* dq,
                                  float* dk, float* dv, bool accumulate, const void* d_lse) {
  if (d_lse || !cudnn_attention_supported(s, DType::bf16)) return false;
  const CudnnPlanKey key = cudnn_plan_key(stream.device().index, s, true);
  return route(
      key, [&] { return cudnn_attention_backward(stream, s, q, k, v, o, lse, d_o, dq, dk, dv, accumulate); },
      [&] { return measure_backward(stream, s, key, q, k, v, o, lse, d_o, dq, dk, dv, accumulate); });
}

std::vector<AttentionChoice> attention_choices() {
  Choices& c = choices();
  std::lock_guard<std::mutex> lock(c.mutex);
  std::vector<AttentionChoice> out;
  for (const auto& [key, entry] : c.entries) out.push_back(entry.choice);
  return out;
}

std::vector<std::string> attention_choice_lines() {
  std::vector<std::string> lines;
  for (const AttentionChoice& c : attention_choices()) {
    const auto ms = [](double t) { return t < 0 ? std::string("-") : fmt::format("{:.3f} ms", t); };
    lines.push_back(fmt::format("{}: {} (own {}, cudnn {}; {})", c.shape, c.which, ms(c.own_ms), ms(c.cudnn_ms),
                                c.reason));
  }
  return lines;
}

std::string cudnn_attention_info() {
  const std::string version = cudnn_version_text();
  if (version.empty()) return "not compiled in (WF_CUDNN off, or cudnn_graph.h / libcudnn not found at configure time)";
  const char* setting = attention_backend_setting() == AttentionBackendSetting::automatic ? "auto"
                        : attention_backend_setting() == AttentionBackendSetting::own  ? "own"
                                                                                        : "cudnn";
  return fmt::format("{} (compiled in; WF_ATTENTION_BACKEND {})", version, setting);
}

}  // namespace wf::kernels::cuda
