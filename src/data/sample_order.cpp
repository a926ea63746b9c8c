// SampleOrder: seeded epoch permutations and the job's sample stream (data/sample_order.h).
#include "wallfacer/data/sample_order.h"

#include <mutex>
#include <utility>

#include "wallfacer/core/error.h"

namespace wf::data {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): a 64-bit stream that is fully specified here, so the
// permutations are the same with every compiler and standard library.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) : state_(state) {}
  std::uint64_t next() { return mix(state_ += 0x9e3779b97f4a7c15ull); }
  static std::uint64_t mix(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n ≥ 1, without bias (Lemire's multiply-and-reject).
  std::uint64_t below(std::uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

 private:
  std::uint64_t state_;
};

}  // namespace

struct SampleOrder::PermutationCache {
  struct Entry {
    std::int64_t epoch = -1;
    std::shared_ptr<const std::vector<std::int64_t>> order;
  };
  std::mutex mutex;
  Entry entries[2];
  int next = 0;  // the entry to replace: the older one
};

std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  WF_CHECK(n >= 0 && epoch >= 0, "epoch_permutation: n = {} and epoch = {} must be non-negative", n, epoch);
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  // Each epoch has its own stream, so epoch e is computed without replaying epochs 0 … e − 1.
  SplitMix64 rng(SplitMix64::mix(seed ^ SplitMix64::mix(static_cast<std::uint64_t>(epoch) + 0x5eedull)));
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i) + 1));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

SampleOrder::SampleOrder(SampleOrderOptions options)
    : options_(options), cache_(std::make_unique<PermutationCache>()) {
  const SampleOrderOptions& o = options_;
  WF_CHECK(o.samples_per_epoch >= 1, "SampleOrder: an epoch needs at least one sample, got {}", o.samples_per_epoch);
  WF_CHECK(o.micro_batch_size >= 1, "BatchLoader: micro_batch_size is {}; it must be at least 1 (train.micro_batch_size)",
           o.micro_batch_size);
  WF_CHECK(o.grad_accum_steps >= 1, "BatchLoader: grad_accum_steps is {}; it must be at least 1", o.grad_accum_steps);
  WF_CHECK(o.dp_size >= 1 && o.dp_rank >= 0 && o.dp_rank < o.dp_size,
           "BatchLoader: dp_rank {} is not a rank of a data-parallel group of {}", o.dp_rank, o.dp_size);
}

SampleOrder::~SampleOrder() = default;
SampleOrder::SampleOrder(SampleOrder&&) noexcept = default;
SampleOrder& SampleOrder::operator=(SampleOrder&&) noexcept = default;

std::int64_t SampleOrder::global_batch_size() const {
  return options_.micro_batch_size * options_.dp_size * options_.grad_accum_steps;
}

std::int64_t SampleOrder::epoch(std::int64_t step) const {
  WF_CHECK(step >= 0, "BatchLoader: step {} is negative", step);
  return step * global_batch_size() / options_.samples_per_epoch;
}

std::int64_t SampleOrder::stream_index(std::int64_t step, std::int64_t micro, std::int64_t b) const {
  WF_CHECK(step >= 0, "BatchLoader: step {} is negative", step);
  WF_CHECK(micro >= 0 && micro < options_.grad_accum_steps,
           "BatchLoader: micro batch {} is outside [0, grad_accum_steps = {})", micro, options_.grad_accum_steps);
  WF_CHECK(b >= 0 && b < options_.micro_batch_size, "BatchLoader: row {} is outside [0, micro_batch_size = {})", b,
           options_.micro_batch_size);
  return ((step * options_.grad_accum_steps + micro) * options_.dp_size + options_.dp_rank) *
             options_.micro_batch_size +
         b;
}

std::int64_t SampleOrder::sample_at(std::int64_t index) const {
  WF_CHECK(index >= 0, "BatchLoader: sample stream index {} is negative", index);
  const std::int64_t within = index % options_.samples_per_epoch;
  if (!options_.shuffle) return within;
  return (*permutation(index / options_.samples_per_epoch))[static_cast<std::size_t>(within)];
}

std::shared_ptr<const std::vector<std::int64_t>> SampleOrder::permutation(std::int64_t epoch) const {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  for (const PermutationCache::Entry& cached : cache_->entries) {
    if (cached.epoch == epoch) return cached.order;
  }
  PermutationCache::Entry& slot = cache_->entries[cache_->next];
  cache_->next = 1 - cache_->next;
  slot.epoch = epoch;
  slot.order = std::make_shared<const std::vector<std::int64_t>>(
      epoch_permutation(options_.samples_per_epoch, options_.seed, epoch));
  return slot.order;
}

}  // namespace wf::data
