// The packed batch of `bench attention --documents` (bench_documents.h).
#include "src/cli/bench_documents.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>

#include "wallfacer/core/error.h"

namespace wf::cli {
namespace {

constexpr std::uint64_t kLengthSeed = 20240607;

// A positive integer, or 0 when `text` is not one.
std::int64_t positive_integer(const std::string& text) {
  if (text.empty() || text.size() > 15 || !std::all_of(text.begin(), text.end(), ::isdigit)) return 0;
  return std::strtoll(text.c_str(), nullptr, 10);
}

[[noreturn]] void refuse(const std::string& spec, const std::string& why) {
  WF_USER_FAIL("--documents {}: {}; give document lengths packed into the sequence (e.g. 4096,512,1536), or "
               "COUNT:mixed or COUNT:equal (e.g. 32:mixed)",
               spec, why);
}

// Boundaries at the cumulative weights, scaled to N, every document at least one token.
std::vector<std::int64_t> scaled(const std::vector<double>& weights, std::int64_t N) {
  double total = 0;
  for (double w : weights) total += w;
  const auto count = static_cast<std::int64_t>(weights.size());
  std::vector<std::int64_t> bounds{0};
  double sum = 0;
  for (std::int64_t i = 0; i + 1 < count; ++i) {
    sum += weights[static_cast<std::size_t>(i)];
    const auto at = static_cast<std::int64_t>(std::llround(double(N) * sum / total));
    bounds.push_back(std::clamp(at, bounds.back() + 1, N - (count - 1 - i)));
  }
  bounds.push_back(N);
  return bounds;
}

}  // namespace

std::vector<std::int64_t> document_bounds_of(const std::string& spec, std::int64_t N) {
  if (const std::size_t colon = spec.find(':'); colon != std::string::npos) {
    const std::int64_t count = positive_integer(spec.substr(0, colon));
    const std::string kind = spec.substr(colon + 1);
    if (count < 1 || count > N) refuse(spec, fmt::format("COUNT must be a whole number in [1, N = {}]", N));
    std::vector<double> weights(static_cast<std::size_t>(count), 1.0);
    if (kind == "mixed") {
      std::mt19937_64 random(kLengthSeed);  // its sequence is fixed by the standard: the same batch everywhere
      for (double& w : weights) w = std::exp2(4.0 * (double(random() >> 11) * 0x1.0p-53) - 2.0);
    } else if (kind != "equal") {
      refuse(spec, fmt::format("'{}' is not a kind of lengths (mixed or equal)", kind));
    }
    return scaled(weights, N);
  }
  std::vector<std::int64_t> lengths;
  std::size_t from = 0;
  while (from <= spec.size()) {
    const std::size_t comma = std::min(spec.find(',', from), spec.size());
    const std::int64_t length = positive_integer(spec.substr(from, comma - from));
    if (length < 1) refuse(spec, fmt::format("'{}' is not a positive length", spec.substr(from, comma - from)));
    lengths.push_back(length);
    from = comma + 1;
  }
  std::vector<std::int64_t> bounds{0};
  for (std::size_t i = 0; bounds.back() < N; ++i) {
    bounds.push_back(std::min(N, bounds.back() + lengths[i % lengths.size()]));
  }
  return bounds;
}

std::string describe_documents(const std::vector<std::int64_t>& bounds) {
  std::int64_t shortest = bounds.back(), longest = 0;
  for (std::size_t i = 1; i < bounds.size(); ++i) {
    shortest = std::min(shortest, bounds[i] - bounds[i - 1]);
    longest = std::max(longest, bounds[i] - bounds[i - 1]);
  }
  const std::string lengths =
      shortest == longest ? fmt::format("{}", shortest) : fmt::format("{}..{}", shortest, longest);
  return fmt::format("{} documents of {} tokens", bounds.size() - 1, lengths);
}

}  // namespace wf::cli
