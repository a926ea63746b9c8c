// failure_report: failure_report.h.
#include "src/cli/failure_report.h"

#include <fmt/format.h>

#include <algorithm>

namespace wf::cli {
namespace {

// "0-1, 3": the ranks in ascending order, runs folded.
std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    text += (text.empty() ? "" : ", ") + (j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]));
    i = j + 1;
  }
  return text;
}

}  // namespace

std::vector<std::string> failure_report(const std::vector<std::string>& by_rank) {
  if (by_rank.empty()) return {};
  const int n = static_cast<int>(by_rank.size());
  if (std::all_of(by_rank.begin(), by_rank.end(), [&](const std::string& m) { return m == by_rank.front(); })) {
    return {n == 1 ? by_rank.front() : fmt::format("{} (all {} ranks agree)", by_rank.front(), n)};
  }
  std::vector<std::string> lines;
  std::vector<bool> reported(by_rank.size(), false);
  for (int r = 0; r < n; ++r) {
    if (reported[r]) continue;
    std::vector<int> ranks;
    for (int s = r; s < n; ++s) {
      if (by_rank[s] == by_rank[r]) {
        ranks.push_back(s);
        reported[s] = true;
      }
    }
    lines.push_back(fmt::format("[rank{} {} of {}] {}", ranks.size() == 1 ? "" : "s", rank_list(ranks), n, by_rank[r]));
  }
  return lines;
}

}  // namespace wf::cli
