// The per-shape choice between the own kernels, cuDNN's attention and the sm_90 forward
// (attention_choice.h says how).
// Compiled, never run: no GPU was reachable when this was written (docs/gpu.md).
#include "kernels/cuda/attention_choice.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string_view>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/sm90/attention.h"
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
  if (v == "sm90") return AttentionBackendSetting::sm90;
  WF_FAIL("WF_ATTENTION_BACKEND={}: expected auto (measure every implementation per shape), own, cudnn or sm90", v);
}

AttentionBackendSetting attention_backend_setting() {
  static const AttentionBackendSetting setting = parse_attention_backend(std::getenv("WF_ATTENTION_BACKEND"));
  return setting;
}

namespace {

// The implementations a bf16 attention call may take besides the own kernels (attention.cu).
enum class Route { own, cudnn, sm90 };
const char* route_name(Route r) { return r == Route::own ? "own" : r == Route::cudnn ? "cudnn" : "sm90"; }

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

struct Entry {
  AttentionChoice choice;
  Route route = Route::own;
};
struct Choices {
  std::mutex mutex;  // held through a first use's measurement
  std::map<ChoiceKey, Entry> entries;
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

// One output of a call: its name, rows × row_len f32 elements, the relative tolerance a
// candidate's must meet against the own kernel's, and where the call wants it.
struct Output {
  const char* name;
  std::int64_t rows, row_len;
  double rtol;
  float* destination;
  std::int64_t size() const { return rows * row_len; }
};

// "" when a candidate's output is within max |candidate − own| <= rtol·max |own| + atol, else why not.
std::string mismatch(const Output& out, const float* own, const float* candidate, const char* name,
                     cudaStream_t stream) {
  const std::vector<float> want = sample_rows(own, out.rows, out.row_len, stream);
  const std::vector<float> got = sample_rows(candidate, out.rows, out.row_len, stream);
  double max_diff = 0, max_ref = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return fmt::format("{}: NaN at sampled element {}", out.name, i);
    if (std::isnan(want[i])) continue;
    // −inf (a row that sees no key) must be matched exactly; inf − inf would read as NaN.
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      if (got[i] != want[i]) return fmt::format("{}: {} where the own kernel has {}", out.name, got[i], want[i]);
      continue;
    }
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
  }
  const double atol = 1e-3;
  if (max_diff <= out.rtol * max_ref + atol) return "";
  return fmt::format("{}: max |{} - own| {:.3g} > {} * max |own| {:.3g} + {}", out.name, name, max_diff, out.rtol,
                     max_ref, atol);
}

void copy_out(const float* src, float* dst, std::int64_t n, bool accumulate, cudaStream_t stream) {
  if (accumulate) {
    launch_add_scaled<float>(stream, n, 1.0f, src, dst);
  } else {
    WF_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice,
                                  stream));
  }
}

// Runs one implementation into `outputs` (one pointer per Output, written, or added to under
// accumulate): false when it did not run (no plan, or refused this call's pointers).
using Runner = std::function<bool(const std::vector<float*>& outputs, bool accumulate)>;
struct Candidate {
  Route route;
  std::string refusal;  // why it cannot take the shape ("" when it can)
  Runner run;
};

// A candidate's run at a first use: "" when it ran, else why not (no plan, or an error running it).
std::string try_run(const Candidate& c, const std::vector<float*>& outputs) {
  try {
    return c.run(outputs, false) ? "" : fmt::format("{} did not take this call", route_name(c.route));
  } catch (const Error& e) {
    log::warn("attention (cuda): {} disabled for a shape: {}", route_name(c.route), e.what());
    return fmt::format("{} failed: {}", route_name(c.route), e.what());
  }
}

// A first use under auto: the own kernel and every candidate that takes the shape run on the call's
// inputs into scratch outputs, timed; a candidate whose outputs differ from the own kernel's is
// disabled for the shape. The call's outputs get the own kernel's; the fastest verified runs later.
Entry measure(const Stream& stream, const ChoiceKey& key, const std::vector<Output>& outs, bool accumulate,
              const Runner& own, const std::vector<Candidate>& candidates) {
  const cudaStream_t ns = native(stream);
  std::deque<detail::CudaScratch> held;  // a deque: scratch buffers neither copy nor move
  const auto scratch_for = [&] {
    std::vector<float*> pointers;
    for (const Output& out : outs) {
      held.emplace_back(stream, static_cast<std::size_t>(out.size()) * sizeof(float));
      pointers.push_back(held.back().as<float>());
    }
    return pointers;
  };
  const std::vector<float*> own_out = scratch_for();
  const auto run_own = [&] { own(own_out, false); };
  run_own();  // warm-up
  Entry e;
  e.choice.shape = choice_key_text(key);
  e.choice.own_ms = time_ms(ns, run_own);
  double best_ms = e.choice.own_ms;
  std::vector<std::string> notes;
  for (const Candidate& c : candidates) {
    double& ms = c.route == Route::cudnn ? e.choice.cudnn_ms : e.choice.sm90_ms;
    if (!c.refusal.empty()) {
      notes.push_back(fmt::format("{}: {}", route_name(c.route), c.refusal));
      continue;
    }
    const std::vector<float*> got = scratch_for();
    std::string why = try_run(c, got);  // builds a plan where there is one, and warms up
    double measured = -1;
    if (why.empty()) {
      why = try_run({c.route, "", [&](const std::vector<float*>& o, bool a) {
                       measured = time_ms(ns, [&] { c.run(o, a); });
                       return true;
                     }},
                    got);
    }
    for (std::size_t i = 0; why.empty() && i < outs.size(); ++i) {
      why = mismatch(outs[i], own_out[i], got[i], route_name(c.route), ns);
      if (!why.empty()) {
        log::warn("attention (cuda): {} disabled for {}: its results differ from the own kernel's ({})",
                  route_name(c.route), e.choice.shape, why);
      }
    }
    if (!why.empty()) {
      notes.push_back(why);
      continue;
    }
    ms = measured;
    notes.push_back(fmt::format("{} matched", route_name(c.route)) +
                    (c.route == Route::cudnn ? " (cuDNN's " + cudnn_plan_kind(key.plan) + ")" : ""));
    if (measured < best_ms) {
      best_ms = measured;
      e.route = c.route;
    }
  }
  for (std::size_t i = 0; i < outs.size(); ++i)
    copy_out(own_out[i], outs[i].destination, outs[i].size(), accumulate, ns);
  e.choice.which = route_name(e.route);
  e.choice.reason = "measured at first use";
  for (const std::string& note : notes) e.choice.reason += "; " + note;
  log::info("attention (cuda): {} runs on {} (own {:.3f} ms, cuDNN {:.3f} ms, sm90 {:.3f} ms)", e.choice.shape,
            e.choice.which, e.choice.own_ms, e.choice.cudnn_ms, e.choice.sm90_ms);
  return e;
}

// The route of one call under the setting: a cached choice, a forced one, or a first use's
// measurement. True when the call's outputs were written here.
bool route(const ChoiceKey& key, const std::vector<Output>& outs, bool accumulate, const Runner& own,
           const std::vector<Candidate>& candidates, const Stream& stream) {
  const AttentionBackendSetting setting = attention_backend_setting();
  if (setting == AttentionBackendSetting::own) return false;
  std::vector<float*> destinations;
  for (const Output& out : outs) destinations.push_back(out.destination);
  const auto candidate = [&](Route r) -> const Candidate* {
    for (const Candidate& c : candidates)
      if (c.route == r && c.refusal.empty()) return &c;
    return nullptr;
  };
  Choices& c = choices();
  std::unique_lock<std::mutex> lock(c.mutex);
  if (auto it = c.entries.find(key); it != c.entries.end()) {
    const Candidate* chosen = candidate(it->second.route);
    lock.unlock();
    return chosen != nullptr && chosen->run(destinations, accumulate);
  }
  if (setting != AttentionBackendSetting::automatic) {
    const Route forced = setting == AttentionBackendSetting::cudnn ? Route::cudnn : Route::sm90;
    lock.unlock();
    const Candidate* chosen = candidate(forced);
    const bool ran = chosen != nullptr && chosen->run(destinations, accumulate);
    Entry e;
    e.route = ran ? forced : Route::own;
    e.choice = {choice_key_text(key), route_name(e.route), -1, -1, -1,
                ran ? fmt::format("WF_ATTENTION_BACKEND={} (unmeasured, unverified)", route_name(forced))
                    : fmt::format("WF_ATTENTION_BACKEND={}, which does not take this shape", route_name(forced))};
    lock.lock();
    c.entries.emplace(key, e);
    return ran;
  }
  c.entries.emplace(key, measure(stream, key, outs, accumulate, own, candidates));
  return true;
}

}  // namespace

bool attention_forward_by_choice(const Stream& stream, const AttentionShape& s, const void* q, const void* k,
                                 const void* v, float* o, float* lse) {
  const int device = stream.device().index;
  Candidate cudnn{Route::cudnn, cudnn_attention_refusal(s, DType::bf16),
                  [&](const std::vector<float*>& out, bool) {
                    return cudnn_attention_forward(stream, s, q, k, v, out[0], out[1]);
                  }};
  Candidate sm90{Route::sm90, sm90_attention_refusal(device, s, q, k, v), [&](const std::vector<float*>& out, bool) {
                   launch_attention_forward_sm90(native(stream), s, bf16_in(q), bf16_in(k), bf16_in(v), out[0],
                                                 out[1]);
                   return true;
                 }};
  if (!cudnn.refusal.empty() && !sm90.refusal.empty()) return false;
  const Runner own = [&](const std::vector<float*>& out, bool) {
    launch_attention_forward(native(stream), s, bf16_in(q), bf16_in(k), bf16_in(v), out[0], out[1]);
    return true;
  };
  const std::vector<Output> outs = {{"o", s.batch * s.q_len * s.heads, s.head_dim, 0.02, o},
                                    {"lse", s.batch * s.heads, s.q_len, 0.02, lse}};
  return route(choice_key(device, s, false), outs, false, own, {cudnn, sm90}, stream);
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
  Candidate cudnn{Route::cudnn, cudnn_refusal, [&](const std::vector<float*>& out, bool add) {
                    return cudnn_attention_backward(stream, s, q, k, v, o, lse, d_o, out[0], out[1], out[2], add);
                  }};
  std::string sm90_refusal = sm90_attention_refusal(device, s, q, k, v);
  if (sm90_refusal.empty() && reinterpret_cast<std::uintptr_t>(d_o) % 16 != 0) {
    sm90_refusal = "d_o is not 16-byte aligned";
  }
  Candidate sm90{Route::sm90, sm90_refusal, [&](const std::vector<float*>& out, bool add) {
                   detail::CudaScratch minus_delta(stream, rows * sizeof(float));
                   launch_attention_backward_sm90(native(stream), s, bf16_in(q), bf16_in(k), bf16_in(v), o, lse,
                                                  bf16_in(d_o), out[0], out[1], out[2], add, d_lse_f32,
                                                  minus_delta.as<float>());
                   return true;
                 }};
  if (!cudnn.refusal.empty() && !sm90.refusal.empty()) return false;
  const Runner own = [&](const std::vector<float*>& out, bool add) {
    detail::CudaScratch minus_delta(stream, rows * sizeof(float));
    launch_attention_backward(native(stream), s, bf16_in(q), bf16_in(k), bf16_in(v), o, lse, bf16_in(d_o), out[0],
                              out[1], out[2], add, d_lse_f32, minus_delta.as<float>());
    return true;
  };
  const std::int64_t d = s.head_dim;
  const std::vector<Output> outs = {{"dq", s.batch * s.q_len * s.heads, d, 0.05, dq},
                                    {"dk", s.batch * s.kv_len * s.kv_heads, d, 0.05, dk},
                                    {"dv", s.batch * s.kv_len * s.kv_heads, d, 0.05, dv}};
  const ChoiceKey key = choice_key(device, s, true, d_lse != nullptr);
  return route(key, outs, accumulate, own, {cudnn, sm90}, stream);
}

std::vector<AttentionChoice> attention_choices() {
  Choices& c = choices();
  std::lock_guard<std::mutex> lock(c.mutex);
  std::vector<AttentionChoice> out;
  for (const auto& [key, entry] : c.entries) out.push_back(entry.choice);
  return out;
}

std::string attention_choice_for(int device, const AttentionShape& s, bool backward) {
  const bool cudnn_takes_it = cudnn_attention_supported(s, DType::bf16);
  // The pointers' alignment is the call's: a shape is judged here as if they were aligned.
  const bool sm90_takes_it = sm90_attention_refusal(device, s, nullptr, nullptr, nullptr).empty();
  if (!cudnn_takes_it && !sm90_takes_it) return route_name(Route::own);
  Choices& c = choices();
  std::lock_guard<std::mutex> lock(c.mutex);
  const auto it = c.entries.find(choice_key(device, s, backward));
  return it == c.entries.end() ? "" : it->second.choice.which;
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
  return fmt::format("{} (compiled in; WF_ATTENTION_BACKEND {})", version, setting);
}

}  // namespace wf::kernels::cuda
