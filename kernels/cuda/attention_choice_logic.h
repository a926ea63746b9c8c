#pragma once
// The per-shape choice's logic (attention_choice.h says what it decides), free of CUDA: which
// implementation a first use measures, which it keeps, what a later call runs, and how outputs
// are compared. The device work it needs (scratch outputs, timing, samples, the copy into the
// call's outputs) comes through ChoiceBench: CUDA's in attention_choice.cpp, a host fake in
// tests/kernels/test_attention_choice.cpp, which checks every decision without a GPU.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cuda/attention_choice.h"

namespace wf::kernels::cuda {

// The implementations a bf16 attention call may take: the own kernels (attention.cu) and the others.
enum class AttentionRoute { own, cudnn, sm90 };
const char* attention_route_name(AttentionRoute route);

// One output of a call: rows × row_len f32 elements, the relative tolerance another
// implementation's must meet against the own kernel's, and where the call wants it.
struct ChoiceOutput {
  const char* name;
  std::int64_t rows, row_len;
  double rtol;
  float* destination;
  std::int64_t size() const { return rows * row_len; }
};

// Runs one implementation into `outputs` (one per ChoiceOutput, written, or added to under
// accumulate): false when it did not run (no plan, or this call's pointers refused).
using ChoiceRunner = std::function<bool(const std::vector<float*>& outputs, bool accumulate)>;
struct ChoiceCandidate {
  AttentionRoute route;
  std::string refusal;  // why it cannot take the shape, "" when it can
  ChoiceRunner run;
};

// What a first use's measurement needs from the device.
class ChoiceBench {
 public:
  virtual ~ChoiceBench() = default;
  // Device memory for `floats` f32 values, held until the bench goes (in the stream's order).
  virtual float* scratch(std::int64_t floats) = 0;
  // Milliseconds one run() takes (the device's timing of a few runs after the caller's warm-up).
  virtual double time_ms(const std::function<void()>& run) = 0;
  // Up to 2^20 elements of an output held at `data` on the device: the same rows for the same sizes.
  virtual std::vector<float> sample(const ChoiceOutput& out, const float* data) = 0;
  // dst (the call's output) = src, or dst += src under accumulate.
  virtual void copy_out(const float* src, float* dst, std::int64_t n, bool accumulate) = 0;
};

// "" when `got` (an implementation named `name`) matches the own kernel's `want`: the same NaNs and
// infinities, and max |got − want| <= rtol·max |want| + 1e-3 over the finite ones; else why not.
std::string choice_mismatch(const char* output, const char* name, const std::vector<float>& want,
                            const std::vector<float>& got, double rtol);

struct ChoiceEntry {
  AttentionChoice choice;
  AttentionRoute route = AttentionRoute::own;
};

// A first use under auto: the own kernel and every candidate that takes the shape run into
// scratch outputs, timed (one warm-up first); a candidate that fails, does not run, or whose
// outputs differ from the own kernel's is disabled for the shape with a warning. The call's
// outputs get the own kernel's; the entry names the fastest of the rest. matched_note(route)
// adds to the reason what a matched candidate ran (cuDNN's graph).
ChoiceEntry measure_choice(ChoiceBench& bench, const std::string& shape, const std::vector<ChoiceOutput>& outputs,
                           bool accumulate, const ChoiceRunner& own, const std::vector<ChoiceCandidate>& candidates,
                           const std::function<std::string(AttentionRoute)>& matched_note);

// The entry a forced setting (WF_ATTENTION_BACKEND=cudnn or sm90) leaves: `forced` where it ran, else own.
ChoiceEntry forced_choice_entry(const std::string& shape, AttentionRoute forced, bool ran);

// The choices a process made, per key, and the route of one call.
template <class Key>
class ChoiceTable {
 public:
  // One call under `setting`: a cached choice runs its implementation; a forced setting (cudnn,
  // sm90) runs that one unmeasured and caches it; auto measures at the first use (a bench from
  // make_bench). True when the call's outputs were written here; false: the caller runs its own
  // kernel (setting own, a cached or forced own, or a chosen implementation refusing this call).
  bool route(AttentionBackendSetting setting, const Key& key, const std::string& shape,
             const std::vector<ChoiceOutput>& outputs, bool accumulate, const ChoiceRunner& own,
             const std::vector<ChoiceCandidate>& candidates,
             const std::function<std::unique_ptr<ChoiceBench>()>& make_bench,
             const std::function<std::string(AttentionRoute)>& matched_note) {
    if (setting == AttentionBackendSetting::own) return false;
    std::vector<float*> destinations;
    for (const ChoiceOutput& out : outputs) destinations.push_back(out.destination);
    const auto takes = [&](AttentionRoute r) -> const ChoiceCandidate* {
      for (const ChoiceCandidate& c : candidates)
        if (c.route == r && c.refusal.empty()) return &c;
      return nullptr;
    };
    std::unique_lock<std::mutex> lock(mutex_);  // held through a first use's measurement
    if (auto it = entries_.find(key); it != entries_.end()) {
      const ChoiceCandidate* chosen = takes(it->second.route);
      lock.unlock();
      return chosen != nullptr && chosen->run(destinations, accumulate);
    }
    if (setting != AttentionBackendSetting::automatic) {
      const AttentionRoute forced =
          setting == AttentionBackendSetting::cudnn ? AttentionRoute::cudnn : AttentionRoute::sm90;
      lock.unlock();
      const ChoiceCandidate* chosen = takes(forced);
      const bool ran = chosen != nullptr && chosen->run(destinations, accumulate);
      lock.lock();
      entries_.emplace(key, forced_choice_entry(shape, forced, ran));
      return ran;
    }
    const std::unique_ptr<ChoiceBench> bench = make_bench();
    entries_.emplace(key, measure_choice(*bench, shape, outputs, accumulate, own, candidates, matched_note));
    return true;
  }

  std::vector<AttentionChoice> choices() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<AttentionChoice> out;
    for (const auto& [key, entry] : entries_) out.push_back(entry.choice);
    return out;
  }
  std::optional<AttentionChoice> find(const Key& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = entries_.find(key);
    return it == entries_.end() ? std::nullopt : std::optional<AttentionChoice>(it->second.choice);
  }

 private:
  mutable std::mutex mutex_;
  std::map<Key, ChoiceEntry> entries_;
};

}  // namespace wf::kernels::cuda
