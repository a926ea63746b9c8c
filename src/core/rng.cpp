#include "wallfacer/core/rng.h"

#include <cmath>
#include <numbers>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wallfacer/core/error.h"

namespace wf {

std::array<std::uint32_t, 4> philox4x32(std::uint64_t key, std::uint64_t counter_lo, std::uint64_t counter_hi) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  std::uint32_t c0 = static_cast<std::uint32_t>(counter_lo), c1 = static_cast<std::uint32_t>(counter_lo >> 32);
  std::uint32_t c2 = static_cast<std::uint32_t>(counter_hi), c3 = static_cast<std::uint32_t>(counter_hi >> 32);
  std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c2;
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

double uniform_at(std::uint64_t seed, std::uint64_t index) {
  const auto w = philox4x32(seed, index);
  // 53 random bits → [0, 1).
  const std::uint64_t bits = (static_cast<std::uint64_t>(w[0]) << 21) ^ (w[1] >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * 0x1.0p-53;
}

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
