#include "wallfacer/core/rng.h"

#include <cmath>
#include <numbers>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "src/core/philox.h"
#include "wallfacer/core/error.h"

namespace wf {

std::array<std::uint32_t, 4> philox4x32(std::uint64_t key, std::uint64_t counter_lo, std::uint64_t counter_hi) {
  const detail::PhiloxBlock w = detail::philox4x32_10(key, counter_lo, counter_hi);
  return {w.word[0], w.word[1], w.word[2], w.word[3]};
}

double uniform_at(std::uint64_t seed, std::uint64_t index) { return detail::philox_uniform(seed, index); }

double normal_at(std::uint64_t seed, std::uint64_t index) {
  const auto w = philox4x32(seed, index);
  // u1 in (0, 1] so the log is finite; u2 in [0, 1).
  const double u1 = (static_cast<double>(w[0]) + 1.0) * 0x1.0p-32;
  const double u2 = static_cast<double>(w[1]) * 0x1.0p-32;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

Generator& default_generator() {
  static Generator generator(0x5eed);
  return generator;
}

void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

Generator::State GeneratorTracker::state(const std::string& name) const {
  const auto it = states_.find(name);
  if (it == states_.end()) {
    std::vector<std::string> known;
    for (const auto& [key, value] : states_) known.push_back(key);
    WF_FAIL("GeneratorTracker: no stream '{}' (streams: [{}]); add it first", name, fmt::join(known, ", "));
  }
  return it->second;
}

GeneratorTracker& generator_tracker() {
  static GeneratorTracker tracker;
  return tracker;
}

ForkedGenerator::ForkedGenerator(const std::string& name) : name_(name), resume_(default_generator().state()) {
  default_generator().set_state(generator_tracker().state(name));
}

ForkedGenerator::~ForkedGenerator() {
  generator_tracker().states_[name_] = default_generator().state();
  default_generator().set_state(resume_);
}

RngSnapshot rng_snapshot() { return {default_generator().state(), generator_tracker().states()}; }

ReplayedGenerator::ReplayedGenerator(const RngSnapshot& snapshot) : resume_(rng_snapshot()) {
  default_generator().set_state(snapshot.default_state);
  generator_tracker().set_states(snapshot.tracked);
}

ReplayedGenerator::~ReplayedGenerator() {
  default_generator().set_state(resume_.default_state);
  generator_tracker().set_states(std::move(resume_.tracked));
}

}  // namespace wf
