// failure_report: what rank 0 prints for the ranks' failure messages (src/cli/failure_report.h).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "src/cli/failure_report.h"

namespace wf::cli {
namespace {

using Lines = std::vector<std::string>;

TEST_CASE("failure_report: ranks that agree give one line saying so", "[cli]") {
  CHECK(failure_report({"bad key", "bad key", "bad key", "bad key"}) == Lines{"bad key (all 4 ranks agree)"});
  CHECK(failure_report({"alone"}) == Lines{"alone"});  // a world of one: the message as it is
  CHECK(failure_report({}).empty());
}

TEST_CASE("failure_report: each distinct message once, with its ranks folded into runs", "[cli]") {
  CHECK(failure_report({"a", "a", "b", "a", "c", "c"}) ==
        Lines{"[ranks 0-1, 3 of 6] a", "[rank 2 of 6] b", "[ranks 4-5 of 6] c"});
  CHECK(failure_report({"x", "y"}) == Lines{"[rank 0 of 2] x", "[rank 1 of 2] y"});
}

}  // namespace
}  // namespace wf::cli
