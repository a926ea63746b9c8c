#pragma once
// Counter-based random numbers (Philox-4x32-10). Element k of a draw depends only on
// (seed, offset + k), never on how many threads or ranks produced it, so a rank can generate
// exactly its slice of a global tensor and get the same numbers as a single process.
#include <array>
#include <cstdint>
#include <map>
#include <string>

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
    friend bool operator==(const State&, const State&) = default;
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

// Named streams besides the default generator (Megatron's CudaRNGStatesTracker). A draw that
// must differ between ranks whose default generators agree — dropout on an activation split
// over tensor parallelism, where each tp rank holds different elements — comes from a stream
// registered here under a name (seeded per rank) and drawn inside a ForkedGenerator scope.
// Only the streams' states are kept: a fork swaps one into the default generator.
class GeneratorTracker {
 public:
  using States = std::map<std::string, Generator::State>;

  // (Re)starts stream `name` at offset 0 of `seed`.
  void seed(const std::string& name, std::uint64_t seed) { states_[name] = Generator::State{seed, 0}; }
  // Puts stream `name` at `state` (a resumed run's offset), creating it if need be.
  void set_state(const std::string& name, Generator::State state) { states_[name] = state; }
  bool contains(const std::string& name) const { return states_.count(name) != 0; }
  // Where stream `name` stands; wf::Error naming the known streams when there is none.
  Generator::State state(const std::string& name) const;
  // Every stream, for a checkpoint; set_states restores exactly that (streams not in `states`
  // are dropped).
  const States& states() const { return states_; }
  void set_states(States states) { states_ = std::move(states); }
  void clear() { states_.clear(); }

 private:
  friend class ForkedGenerator;
  States states_;
};

// The process-wide tracker that ForkedGenerator and the activation checkpoints use.
GeneratorTracker& generator_tracker();

// For a scope (Megatron's `with tracker.fork(name):`): the default generator continues stream
// `name` of generator_tracker(); on leaving, also by an exception, the stream keeps where the
// scope's draws left it and the default generator is back where it was, untouched by them.
class ForkedGenerator {
 public:
  explicit ForkedGenerator(const std::string& name);
  ~ForkedGenerator();
  ForkedGenerator(const ForkedGenerator&) = delete;
  ForkedGenerator& operator=(const ForkedGenerator&) = delete;

 private:
  std::string name_;
  Generator::State resume_;
};

// Where every stream stands: the default generator and the tracker's named streams. Activation
// checkpointing takes one before a forward it will recompute, so that every dropout in it, in
// whichever stream, draws the same masks again.
struct RngSnapshot {
  Generator::State default_state;
  GeneratorTracker::States tracked;
};
RngSnapshot rng_snapshot();

// Sets every stream to `snapshot` for a scope and restores where they were on leaving, also
// when the scope throws: a recompute replays the forward's draws, and the rest of training must
// not see them (activation checkpointing).
class ReplayedGenerator {
 public:
  explicit ReplayedGenerator(const RngSnapshot& snapshot);
  ~ReplayedGenerator();
  ReplayedGenerator(const ReplayedGenerator&) = delete;
  ReplayedGenerator& operator=(const ReplayedGenerator&) = delete;

 private:
  RngSnapshot resume_;
};

}  // namespace wf
