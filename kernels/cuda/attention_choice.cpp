// The per-shape choice between the own kernels, cuDNN's attention and the sm_90 kernels
// (attention_choice.h says how): its CUDA side. The decisions are attention_choice_logic.cpp's,
// tested on the host; this file's device work (the bench, the runners) has not run on a GPU yet
// (docs/gpu.md).
#include "kernels/cuda/attention_choice.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_choice_logic.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/sm90/attention.h"
#include "src/core/cuda/cuda_check.h"
#include "src/core/cuda/cuda_device.h"
#include "src/core/graph_capture.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"

namespace wf::kernels::cuda {

AttentionBackendSetting parse_attention_backend(const char* value) {
  const std::string_view v = value ? value : "";
  if (v.empty() || v == "auto") return AttentionBackendSetting::automatic;
  if (v == "own") return AttentionBackendSetting::own;
  if (v == "cudnn") return AttentionBackendSetting::cudnn;
  if (v == "sm90") return AttentionBackendSetting::sm90;
  WF_FAIL("WF_ATTENTION_BACKEND={}: expected auto (measure every implementation per shape), own, cudnn or sm90", v);
}

AttentionBackendSetting attention_backend_setting() {
  static const AttentionBackendSetting setting = parse_attention_backend(std::getenv("WF_ATTENTION_BACKEND"));
  return setting;
}

bool parse_sm90_switch(const char* value) {
  const std::string_view v = value ? value : "";
  if (v.empty() || v == "0" || v == "off") return false;
  if (v == "1" || v == "on") return true;
  WF_FAIL("WF_ATTENTION_SM90={}: expected 1 or on (the sm_90 kernels are measured at first use), 0 or off", v);
}

bool sm90_attention_enabled() {
  static const bool on = parse_sm90_switch(std::getenv("WF_ATTENTION_SM90")) ||
                         attention_backend_setting() == AttentionBackendSetting::sm90;
  return on;
}

namespace {

// What a cached choice is keyed by: cuDNN's plan key (sizes, direction, the diagonal cuDNN
// expresses), plus what it does not express: key windows, where a causal mask's diagonal lies
// (ring blocks at any offsets: each is measured, and verified, on its own), and a backward with a
// gradient at lse (which cuDNN cannot take, so its candidates differ).
struct ChoiceKey {
  CudnnPlanKey plan;
  bool windows = false, causal = false;
  std::int64_t diagonal = 0;  // q_offset − kv_offset of a causal shape without windows, else 0
  bool d_lse = false;
  auto operator<=>(const ChoiceKey&) const = default;
};
ChoiceKey choice_key(int device, const AttentionShape& s, bool backward, bool d_lse = false) {
  const bool windows = s.windows.ranges != nullptr;
  return {cudnn_plan_key(device, s, backward), windows, s.causal,
          s.causal && !windows ? s.q_offset - s.kv_offset : 0, d_lse};
}
std::string choice_key_text(const ChoiceKey& key) {
  std::string text = cudnn_plan_key_text(key.plan);
  if (key.windows) text += ", key windows";
  if (key.diagonal != 0) text += fmt::format(", diagonal at q_offset - kv_offset {}", key.diagonal);
  if (key.d_lse) text += ", with d_lse";
  return text;
}

// Why the sm_90 kernels do not take this call ("" when they do): switched off, or their refusal.
std::string sm90_refusal(int device, const AttentionShape& s, const void* q, const void* k, const void* v) {
  if (!sm90_attention_enabled()) return "off until they have run on a GPU (WF_ATTENTION_SM90=1 turns them on)";
  return sm90_attention_refusal(device, s, q, k, v);
}

ChoiceTable<ChoiceKey>& table() {
  static auto* t = new ChoiceTable<ChoiceKey>;  // never destroyed: read by `info` and by threads at exit
  return *t;
}

const __nv_bfloat16* bf16_in(const void* p) { return static_cast<const __nv_bfloat16*>(p); }

// The CUDA side of a first use's measurement: scratch from the allocator in the stream's order,
// CUDA events, strided samples copied to the host, the copy into the call's outputs.
class CudaChoiceBench final : public ChoiceBench {
 public:
  // A graph cannot hold the measurement's host waits: a shape first met while capturing fails the
  // capture (the trainer captures after an eager step, which met every shape already).
  explicit CudaChoiceBench(const Stream& stream) : stream_(stream), native_(native(stream)) {
    detail::refuse_host_wait_in_capture("the first use of an attention shape, which times its kernels");
  }

  float* scratch(std::int64_t floats) override {
    held_.emplace_back(stream_, static_cast<std::size_t>(std::max<std::int64_t>(floats, 1)) * sizeof(float));
    return held_.back().as<float>();
  }

  // The mean of three runs, timed by events (the host waits once).
  double time_ms(const std::function<void()>& run) override {
    constexpr int kRuns = 3;
    cudaEvent_t start = nullptr, stop = nullptr;
    WF_CUDA_CHECK(cudaEventCreate(&start));
    WF_CUDA_CHECK(cudaEventCreate(&stop));
    WF_CUDA_CHECK(cudaEventRecord(start, native_));
    for (int i = 0; i < kRuns; ++i) run();
    WF_CUDA_CHECK(cudaEventRecord(stop, native_));
    WF_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    WF_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return static_cast<double>(ms) / kRuns;
  }

  // Up to kSampled elements: every step-th row, the same rows for the same sizes.
  std::vector<float> sample(const ChoiceOutput& out, const float* data) override {
    constexpr std::int64_t kSampled = std::int64_t{1} << 20;
    const std::int64_t rows = out.rows, row_len = out.row_len;
    if (rows == 0 || row_len == 0) return {};
    const std::int64_t max_rows = std::max<std::int64_t>(1, kSampled / row_len);
    const std::int64_t step = (rows + max_rows - 1) / max_rows;
    const std::int64_t taken = (rows + step - 1) / step;
    std::vector<float> host(static_cast<std::size_t>(taken * row_len));
    const std::size_t width = static_cast<std::size_t>(row_len) * sizeof(float);
    const std::size_t pitch = static_cast<std::size_t>(step) * width;
    if (pitch <= static_cast<std::size_t>(INT32_MAX)) {
      WF_CUDA_CHECK(cudaMemcpy2DAsync(host.data(), width, data, pitch, width, static_cast<std::size_t>(taken),
                                      cudaMemcpyDeviceToHost, native_));
    } else {  // a pitch past what cudaMemcpy2D takes: row by row
      for (std::int64_t r = 0; r < taken; ++r) {
        WF_CUDA_CHECK(cudaMemcpyAsync(host.data() + r * row_len, data + r * step * row_len, width,
                                      cudaMemcpyDeviceToHost, native_));
      }
    }
    WF_CUDA_CHECK(cudaStreamSynchronize(native_));
    return host;
  }

  void copy_out(const float* src, float* dst, std::int64_t n, bool accumulate) override {
    if (n == 0) return;
    if (accumulate) {
      launch_add_scaled<float>(native_, n, 1.0f, src, dst);
    } else {
      WF_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(float),
                                    cudaMemcpyDeviceToDevice, native_));
    }
  }

 private:
  Stream stream_;
  cudaStream_t native_;
  std::deque<detail::CudaScratch> held_;  // a deque: scratch buffers neither copy nor move
};

// One call's route through the table, with a CUDA bench for a first use.
bool route(const Stream& stream, const ChoiceKey& key, const std::vector<ChoiceOutput>& outputs, bool accumulate,
           const ChoiceRunner& own, const std::vector<ChoiceCandidate>& candidates) {
  return table().route(
      attention_backend_setting(), key, choice_key_text(key), outputs, accumulate, own, candidates,
      [&] { return std::make_unique<CudaChoiceBench>(stream); },
      [&](AttentionRoute r) { return r == AttentionRoute::cudnn ? "cuDNN's " + cudnn_plan_kind(key.plan) : ""; });
}

}  // namespace

bool attention_forward_by_choice(const Stream& stream, const AttentionShape& s, const void* q, const void* k,
                                 const void* v, float* o, float* lse) {
  const int device = stream.device().index;
  const ChoiceCandidate cudnn{AttentionRoute::cudnn, cudnn_attention_refusal(s, DType::bf16),
                              [&](const std::vector<float*>& out, bool) {
                                return cudnn_attention_forward(stream, s, q, k, v, out[0], out[1]);
                              }};
  const ChoiceCandidate sm90{AttentionRoute::sm90, sm90_refusal(device, s, q, k, v),
                             [&](const std::vector<float*>& out, bool) {
                               launch_attention_forward_sm90(native(stream), s, bf16_in(q), bf16_in(k), bf16_in(v),
                                                             out[0], out[1]);
                               return true;
                             }};
  if (!cudnn.refusal.empty() && !sm90.refusal.empty()) return false;
  const ChoiceRunner own = [&](const std::vector<float*>& out, bool) {
    launch_attention_forward(native(stream), s, bf16_in(q), bf16_in(k), bf16_in(v), out[0], out[1]);
    return true;
  };
  const std::vector<ChoiceOutput> outs = {{"o", s.batch * s.q_len * s.heads, s.head_dim, 0.02, o},
                                          {"lse", s.batch * s.heads, s.q_len, 0.02, lse}};
  return route(stream, choice_key(device, s, false), outs, false, own, {cudnn, sm90});
}

bool attention_backward_by_choice(const Stream& stream, const AttentionShape& s, const void* q, const void* k,
                                  const void* v, const float* o, const float* lse, const void* d_o, float* dq,
                                  float* dk, float* dv, bool accumulate, const void* d_lse) {
  const int device = stream.device().index;
  const std::size_t rows = static_cast<std::size_t>(s.batch * s.heads * s.q_len);
  const auto* d_lse_f32 = static_cast<const float*>(d_lse);
  // cuDNN's graph computes D from dO and O alone: a call with a d_lse is not cuDNN's.
  std::string cudnn_refusal = cudnn_attention_refusal(s, DType::bf16);
  if (cudnn_refusal.empty() && d_lse != nullptr) cudnn_refusal = "a gradient at lse (d_lse)";
  const ChoiceCandidate cudnn{AttentionRoute::cudnn, cudnn_refusal, [&](const std::vector<float*>& out, bool add) {
    return cudnn_attention_backward(stream, s, q, k, v, o, lse, d_o, out[0], out[1], out[2], add);
  }};
  std::string sm90_why = sm90_refusal(device, s, q, k, v);
  if (sm90_why.empty() && reinterpret_cast<std::uintptr_t>(d_o) % 16 != 0) sm90_why = "d_o is not 16-byte aligned";
  const ChoiceCandidate sm90{AttentionRoute::sm90, sm90_why, [&](const std::vector<float*>& out, bool add) {
    detail::CudaScratch minus_delta(stream, rows * sizeof(float));
    launch_attention_backward_sm90(native(stream), s, bf16_in(q), bf16_in(k), bf16_in(v), o, lse, bf16_in(d_o),
                                   out[0], out[1], out[2], add, d_lse_f32, minus_delta.as<float>());
    return true;
  }};
  if (!cudnn.refusal.empty() && !sm90.refusal.empty()) return false;
  const ChoiceRunner own = [&](const std::vector<float*>& out, bool add) {
    detail::CudaScratch minus_delta(stream, rows * sizeof(float));
    launch_attention_backward(native(stream), s, bf16_in(q), bf16_in(k), bf16_in(v), o, lse, bf16_in(d_o), out[0],
                              out[1], out[2], add, d_lse_f32, minus_delta.as<float>());
    return true;
  };
  const std::int64_t d = s.head_dim;
  const std::vector<ChoiceOutput> outs = {{"dq", s.batch * s.q_len * s.heads, d, 0.05, dq},
                                          {"dk", s.batch * s.kv_len * s.kv_heads, d, 0.05, dk},
                                          {"dv", s.batch * s.kv_len * s.kv_heads, d, 0.05, dv}};
  const ChoiceKey key = choice_key(device, s, true, d_lse != nullptr);
  return route(stream, key, outs, accumulate, own, {cudnn, sm90});
}

std::vector<AttentionChoice> attention_choices() { return table().choices(); }

std::string attention_choice_for(int device, const AttentionShape& s, bool backward) {
  const bool cudnn_takes_it = cudnn_attention_supported(s, DType::bf16);
  // The pointers' alignment is the call's: a shape is judged here as if they were aligned.
  const bool sm90_takes_it = sm90_refusal(device, s, nullptr, nullptr, nullptr).empty();
  if (!cudnn_takes_it && !sm90_takes_it) return attention_route_name(AttentionRoute::own);
  const std::optional<AttentionChoice> choice = table().find(choice_key(device, s, backward));
  return choice ? choice->which : "";
}

std::vector<std::string> attention_choice_lines() {
  std::vector<std::string> lines;
  for (const AttentionChoice& c : attention_choices()) {
    const auto ms = [](double t) { return t < 0 ? std::string("-") : fmt::format("{:.3f} ms", t); };
    lines.push_back(fmt::format("{}: {} (own {}, cudnn {}, sm90 {}; {})", c.shape, c.which, ms(c.own_ms),
                                ms(c.cudnn_ms), ms(c.sm90_ms), c.reason));
  }
  return lines;
}

std::string cudnn_attention_info() {
  const std::string version = cudnn_version_text();
  if (version.empty()) return "not compiled in (WF_CUDNN off, or cudnn_graph.h / libcudnn not found at configure time)";
  const char* setting = attention_backend_setting() == AttentionBackendSetting::automatic ? "auto"
                        : attention_backend_setting() == AttentionBackendSetting::own  ? "own"
                        : attention_backend_setting() == AttentionBackendSetting::cudnn ? "cudnn"
                                                                                         : "sm90";
  return fmt::format("{} (compiled in; WF_ATTENTION_BACKEND {}; sm_90 kernels {})", version, setting,
                     sm90_attention_enabled() ? "on" : "off");
}

}  // namespace wf::kernels::cuda
