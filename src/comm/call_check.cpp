#include "src/comm/call_check.h"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <vector>

#include "src/comm/watchdog.h"
#include "wallfacer/core/error.h"

namespace wf::comm {
namespace {

constexpr std::array<const char*, 7> kCalls = {"all_reduce", "all_gather", "all_gather_v", "reduce_scatter",
                                               "all_to_all", "broadcast",  "barrier"};
constexpr int kShownDims = 8;

// One rank's header, as int64 words so one all_gather moves it.
// kErrorBytes: the length of the rank's local error message, 0 when its local checks passed.
enum Word {
  kCall,
  kDtype,
  kDetail,
  kSequence,
  kNdim,
  kShapeHash,
  kRowShapeHash,
  kErrorBytes,
  kDims,
  kWords = kDims + kShownDims
};

int call_code(const char* primitive) {
  for (std::size_t i = 0; i < kCalls.size(); ++i) {
    if (std::strcmp(kCalls[i], primitive) == 0) return static_cast<int>(i);
  }
  WF_FAIL("argument check: unknown collective '{}'", primitive);
}
const char* call_name(std::int64_t code) {
  return code >= 0 && code < static_cast<std::int64_t>(kCalls.size()) ? kCalls[static_cast<std::size_t>(code)]
                                                                       : "(corrupt header)";
}
bool is_reduction(std::int64_t code) { return code == 0 || code == 3; }

std::array<std::int64_t, kWords> make_header(std::int64_t sequence, const CallSignature& call) {
  std::array<std::int64_t, kWords> h{};
  h[kCall] = call_code(call.primitive);
  h[kSequence] = sequence;
  h[kDetail] = call.detail;
  h[kNdim] = -1;
  h[kDtype] = -1;
  if (call.local_error != nullptr) {
    h[kErrorBytes] = static_cast<std::int64_t>(call.local_error->size());
  } else if (call.shape != nullptr) {
    const Shape& s = *call.shape;
    h[kDtype] = static_cast<std::int64_t>(call.dtype);
    h[kNdim] = static_cast<std::int64_t>(s.size());
    h[kShapeHash] = static_cast<std::int64_t>(hash_values(s.data(), s.size()));
    h[kRowShapeHash] = s.empty() ? 0 : static_cast<std::int64_t>(hash_values(s.data() + 1, s.size() - 1));
    for (std::size_t d = 0; d < s.size() && d < kShownDims; ++d) h[kDims + d] = s[d];
  }
  return h;
}

std::string describe(const std::int64_t* h) {
  const std::int64_t code = h[kCall];
  std::string args;
  if (h[kNdim] >= 0) {
    std::vector<std::int64_t> dims(h + kDims, h + kDims + std::min<std::int64_t>(h[kNdim], kShownDims));
    args = fmt::format("{} [{}{}]", dtype_name(static_cast<DType>(h[kDtype])), fmt::join(dims, ", "),
                       h[kNdim] > kShownDims ? ", ..." : "");
  }
  if (is_reduction(code)) args += fmt::format(", {}", reduce_op_name(static_cast<ReduceOp>(h[kDetail])));
  if (code == 5) args += fmt::format(", root {}", h[kDetail]);
  return fmt::format("{}({})", call_name(code), args);
}

// Empty when the two headers agree, else what differs.
std::string difference(const std::int64_t* a, const std::int64_t* b) {
  if (a[kCall] != b[kCall]) return "different collectives";
  if (a[kDtype] != b[kDtype]) return "the dtypes differ";
  const bool dim0_may_differ = kCalls[static_cast<std::size_t>(a[kCall])] == std::string_view("all_gather_v");
  if (a[kNdim] != b[kNdim]) return "the shapes differ";
  if (dim0_may_differ ? a[kRowShapeHash] != b[kRowShapeHash] : a[kShapeHash] != b[kShapeHash]) {
    return dim0_may_differ ? "the shapes differ beyond dim 0" : "the shapes differ";
  }
  if (a[kDetail] != b[kDetail]) {
    if (is_reduction(a[kCall])) return "the reduce ops differ";
    if (a[kCall] == 5) return "the roots differ";
    return "the lists of row counts differ";
  }
  if (a[kSequence] != b[kSequence]) return "a rank skipped or added a collective on this group before";
  return {};
}

// When a rank's local checks failed: every rank throws the first such rank's message, which
// that rank broadcasts (its length is in every header already).
void fail_if_a_rank_failed(Backend& backend, const std::string& group, const CallSignature& call,
                           const std::int64_t* table) {
  std::vector<int> failed;
  for (int r = 0; r < backend.size(); ++r) {
    if (table[static_cast<std::ptrdiff_t>(r) * kWords + kErrorBytes] > 0) failed.push_back(r);
  }
  if (failed.empty()) return;
  const int reporter = failed.front();
  Tensor text = Tensor::empty({table[static_cast<std::ptrdiff_t>(reporter) * kWords + kErrorBytes]}, DType::u8);
  if (backend.rank() == reporter) std::memcpy(text.raw_data(), call.local_error->data(), call.local_error->size());
  backend.broadcast(text, reporter);
  const std::string message(static_cast<const char*>(text.raw_data()), static_cast<std::size_t>(text.numel()));
  WF_FAIL("{} on group '{}': the arguments failed their checks on group rank(s) [{}] of {}, so no rank runs the "
          "call (argument checks on); rank {}: {}",
          call.primitive, group, fmt::join(failed, ", "), backend.size(), reporter, message);
}

}  // namespace

std::uint64_t hash_values(const std::int64_t* values, std::size_t count) {
  std::uint64_t hash = 14695981039346656037ull;
  for (std::size_t i = 0; i < count; ++i) {
    hash ^= static_cast<std::uint64_t>(values[i]);
    hash *= 1099511628211ull;
  }
  return hash;
}

void check_call_agreement(Backend& backend, const std::string& group, std::int64_t sequence,
                          const CallSignature& call) {
  const auto header = make_header(sequence, call);
  const std::string label = fmt::format("{} (argument check)", call.primitive);
  const CallLabel labelled(label.c_str());
  Tensor mine = Tensor::from_vector(std::vector<std::int64_t>(header.begin(), header.end()), {kWords});
  Tensor all = Tensor::empty({static_cast<std::int64_t>(backend.size()) * kWords}, DType::i64);
  backend.all_gather(mine, all);
  fail_if_a_rank_failed(backend, group, call, all.data<std::int64_t>());
  // Everyone compares against rank 0 in rank order, so every rank reports the same pair.
  const std::int64_t* table = all.data<std::int64_t>();
  for (int r = 1; r < backend.size(); ++r) {
    const std::int64_t* other = table + static_cast<std::ptrdiff_t>(r) * kWords;
    const std::string what = difference(table, other);
    if (what.empty()) continue;
    WF_FAIL("argument mismatch in {} on group '{}' (this is group rank {}): rank 0 calls {} as call #{} on the "
            "group, but rank {} calls {} as call #{} ({}); every rank of a group must make the same collective "
            "calls in the same order, with the same dtype, shape and options",
            call.primitive, group, backend.rank(), describe(table), table[kSequence], r, describe(other),
            other[kSequence], what);
  }
}

}  // namespace wf::comm
