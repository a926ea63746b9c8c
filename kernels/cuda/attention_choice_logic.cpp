// The per-shape choice's decisions (attention_choice_logic.h), free of CUDA: tested on the host
// (tests/kernels/test_attention_choice.cpp) with a bench that is host memory and preset times.
#include "kernels/cuda/attention_choice_logic.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"

namespace wf::kernels::cuda {

const char* attention_route_name(AttentionRoute route) {
  switch (route) {
    case AttentionRoute::own: return "own";
    case AttentionRoute::cudnn: return "cudnn";
    case AttentionRoute::sm90: return "sm90";
  }
  return "?";
}

std::string choice_mismatch(const char* output, const char* name, const std::vector<float>& want,
                            const std::vector<float>& got, double rtol) {
  if (got.size() != want.size()) return fmt::format("{}: {} samples where the own kernel has {}", output, got.size(),
                                                    want.size());
  double max_diff = 0, max_ref = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return fmt::format("{}: NaN at sampled element {}", output, i);
    if (std::isnan(want[i])) continue;
    // −inf (a row that sees no key) must be matched exactly; inf − inf would read as NaN.
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      if (got[i] != want[i]) {
        return fmt::format("{}: {} at sampled element {} where the own kernel has {}", output, got[i], i, want[i]);
      }
      continue;
    }
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
  }
  const double atol = 1e-3;
  if (max_diff <= rtol * max_ref + atol) return "";
  return fmt::format("{}: max |{} - own| {:.3g} > {} * max |own| {:.3g} + {}", output, name, max_diff, rtol, max_ref,
                     atol);
}

namespace {

// A candidate's run at a first use: "" when it ran, else why not (it took no call, or failed).
std::string try_run(const ChoiceCandidate& c, const std::function<bool()>& run) {
  const char* name = attention_route_name(c.route);
  try {
    return run() ? "" : fmt::format("{} did not take this call", name);
  } catch (const Error& e) {
    log::warn("attention (cuda): {} disabled for a shape: {}", name, e.what());
    return fmt::format("{} failed: {}", name, e.what());
  }
}

}  // namespace

ChoiceEntry measure_choice(ChoiceBench& bench, const std::string& shape, const std::vector<ChoiceOutput>& outputs,
                           bool accumulate, const ChoiceRunner& own, const std::vector<ChoiceCandidate>& candidates,
                           const std::function<std::string(AttentionRoute)>& matched_note) {
  const auto scratch = [&] {
    std::vector<float*> pointers;
    for (const ChoiceOutput& out : outputs) pointers.push_back(bench.scratch(out.size()));
    return pointers;
  };
  const std::vector<float*> own_out = scratch();
  // The own kernel's outputs on the host, sampled at the first comparison and kept for the others.
  std::vector<std::optional<std::vector<float>>> own_samples(outputs.size());
  const auto own_sample = [&](std::size_t i) -> const std::vector<float>& {
    if (!own_samples[i]) own_samples[i] = bench.sample(outputs[i], own_out[i]);
    return *own_samples[i];
  };
  const auto run_own = [&] { own(own_out, false); };
  run_own();  // warm-up
  ChoiceEntry e;
  e.choice.shape = shape;
  e.choice.own_ms = bench.time_ms(run_own);
  double best_ms = e.choice.own_ms;
  std::vector<std::string> notes;
  for (const ChoiceCandidate& c : candidates) {
    const char* name = attention_route_name(c.route);
    if (!c.refusal.empty()) {
      notes.push_back(fmt::format("{}: {}", name, c.refusal));
      continue;
    }
    const std::vector<float*> got = scratch();
    std::string why = try_run(c, [&] { return c.run(got, false); });  // builds a plan where there is one; warms up
    double ms = -1;
    if (why.empty()) {
      why = try_run(c, [&] {
        ms = bench.time_ms([&] { c.run(got, false); });
        return true;
      });
    }
    for (std::size_t i = 0; why.empty() && i < outputs.size(); ++i) {
      why = choice_mismatch(outputs[i].name, name, own_sample(i), bench.sample(outputs[i], got[i]), outputs[i].rtol);
      if (!why.empty()) {
        log::warn("attention (cuda): {} disabled for {}: its results differ from the own kernel's ({})", name, shape,
                  why);
      }
    }
    if (!why.empty()) {
      notes.push_back(why);
      continue;
    }
    (c.route == AttentionRoute::cudnn ? e.choice.cudnn_ms : e.choice.sm90_ms) = ms;
    const std::string detail = matched_note ? matched_note(c.route) : std::string();
    notes.push_back(fmt::format("{} matched{}", name, detail.empty() ? "" : " (" + detail + ")"));
    if (ms < best_ms) {
      best_ms = ms;
      e.route = c.route;
    }
  }
  for (std::size_t i = 0; i < outputs.size(); ++i)
    bench.copy_out(own_out[i], outputs[i].destination, outputs[i].size(), accumulate);
  e.choice.which = attention_route_name(e.route);
  e.choice.reason = "measured at first use";
  for (const std::string& note : notes) e.choice.reason += "; " + note;
  log::info("attention (cuda): {} runs on {} (own {:.3f} ms, cuDNN {:.3f} ms, sm90 {:.3f} ms)", shape,
            e.choice.which, e.choice.own_ms, e.choice.cudnn_ms, e.choice.sm90_ms);
  return e;
}

ChoiceEntry forced_choice_entry(const std::string& shape, AttentionRoute forced, bool ran) {
  ChoiceEntry e;
  e.route = ran ? forced : AttentionRoute::own;
  const char* name = attention_route_name(forced);
  e.choice = {shape, attention_route_name(e.route), -1, -1, -1,
              ran ? fmt::format("WF_ATTENTION_BACKEND={} (unmeasured, unverified)", name)
                  : fmt::format("WF_ATTENTION_BACKEND={}, which does not take this shape", name)};
  return e;
}

}  // namespace wf::kernels::cuda
