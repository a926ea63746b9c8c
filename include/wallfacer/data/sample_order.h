#pragma once
// The order in which a run reads its samples, the same for every layout: the job's sample
// stream is micro batch after micro batch of every dp rank,
//   stream index ((step·grad_accum + micro)·dp_size + dp_rank)·micro_batch_size + b,
// and stream index s holds sample perm_e(s mod S) of epoch e = s / S (S samples an epoch, a
// seeded Fisher–Yates permutation per epoch, or file order without shuffle). Pure arithmetic of
// (seed, step): any step is computed without state. The token loader and the image batches
// (DiT) both read through it; draws keyed by the stream index (diffusion noise, timesteps) are
// then the same under every layout.
#include <cstdint>
#include <memory>
#include <vector>

namespace wf::data {

struct SampleOrderOptions {
  std::int64_t samples_per_epoch = 0;  // S ≥ 1
  std::int64_t micro_batch_size = 1;
  std::int64_t grad_accum_steps = 1;
  int dp_size = 1, dp_rank = 0;
  std::uint64_t seed = 0;
  bool shuffle = true;
};

class SampleOrder {
 public:
  // wf::Error naming the option when the options are inconsistent.
  explicit SampleOrder(SampleOrderOptions options);
  ~SampleOrder();
  SampleOrder(SampleOrder&&) noexcept;
  SampleOrder& operator=(SampleOrder&&) noexcept;

  std::int64_t stream_index(std::int64_t step, std::int64_t micro, std::int64_t b) const;
  std::int64_t sample_at(std::int64_t stream_index) const;  // thread-safe
  std::int64_t global_batch_size() const;  // micro_batch_size · dp_size · grad_accum_steps
  std::int64_t epoch(std::int64_t step) const;  // of the first sample of `step`
  const SampleOrderOptions& options() const { return options_; }

 private:
  std::shared_ptr<const std::vector<std::int64_t>> permutation(std::int64_t epoch) const;

  SampleOrderOptions options_;
  // The permutations of the two most recently used epochs (a step may straddle two), behind a
  // pointer so the order stays movable.
  struct PermutationCache;
  std::unique_ptr<PermutationCache> cache_;
};

// The seeded permutation of [0, n) for one epoch: Fisher–Yates over a splitmix64 stream keyed
// by (seed, epoch), with unbiased bounded draws. Fixed here (never std::shuffle, whose
// algorithm differs between standard libraries) so the order is the same on every platform.
std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch);

}  // namespace wf::data
