#pragma once
// Counter-based random numbers (Philox-4x32-10). Element k of a draw depends only on
// (seed, offset + k), never on how many threads or ranks produced it, so a rank can generate
// exactly its slice of a global tensor and get the same numbers as a single process.
#include <array>
#include <cstdint>

namespace wf {

// One Philox-4x32-10 block: four 32-bit outputs for a 64-bit key and 128-bit counter.
std::array<std::uint32_t, 4> philox4x32(std::uint64_t key, std::uint64_t counter_lo, std::uint64_t counter_hi = 0);

// Element k of a stream: uniform in [0, 1) and standard normal (Box–Muller on the first two
// words of block k; the other two are unused so elements stay independent of each other).
double uniform_at(std::uint64_t seed, std::uint64_t index);
double normal_at(std::uint64_t seed, std::uint64_t index);

// A seeded stream with a position. Each draw of n elements consumes indices
// [offset, offset + n); its state (seed, offset) can be saved and restored, which is how
// activation checkpointing replays dropout masks exactly.
class Generator {
 public:
  struct State {
    std::uint64_t seed = 0;
    std::uint64_t offset = 0;
  };

  explicit Generator(std::uint64_t seed = 0) : state_{seed, 0} {}

  std::uint64_t seed() const { return state_.seed; }
  std::uint64_t offset() const { return state_.offset; }
  void manual_seed(std::uint64_t seed) { state_ = {seed, 0}; }
  State state() const { return state_; }
  void set_state(State s) { state_ = s; }
  // Reserves n indices and returns the first.
  std::uint64_t advance(std::uint64_t n) {
    const std::uint64_t first = state_.offset;
    state_.offset += n;
    return first;
  }

 private:
  State state_;
};

// The process-wide generator used when none is given (parameter init, dropout).
Generator& default_generator();
void manual_seed(std::uint64_t seed);

// Sets the default generator to `state` for a scope and restores where it was on leaving, also
// when the scope throws: a recompute replays the forward's draws, and the rest of training must
// not see them (activation checkpointing).
class ReplayedGenerator {
 public:
  explicit ReplayedGenerator(Generator::State state) : resume_(default_generator().state()) {
    default_generator().set_state(state);
  }
  ~ReplayedGenerator() { default_generator().set_state(resume_); }
  ReplayedGenerator(const ReplayedGenerator&) = delete;
  ReplayedGenerator& operator=(const ReplayedGenerator&) = delete;

 private:
  Generator::State resume_;
};

}  // namespace wf
