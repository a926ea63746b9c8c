// The main of test_dist: every rank runs the whole Catch2 session, then the ranks agree on the
// outcome. Any rank failing makes every rank exit non-zero. Rank 0 prints its report as usual;
// the other ranks keep theirs in memory and print it only when they failed, so one run under
// `mpirun -np 8` prints one summary, not eight.
#define CATCH_CONFIG_RUNNER
#define CATCH_CONFIG_NOSTDOUT
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <vector>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/error.h"

namespace {

bool g_quiet_rank = false;  // set on ranks other than 0: their report goes to g_report

std::ostringstream& g_report() {
  static std::ostringstream stream;
  return stream;
}

// Exercises run_main's failure path (CTest entry dist_run_main_abort): the named rank throws
// before the tests start, while the others go on into collectives that can never complete.
void maybe_fail_on_purpose(int rank) {
  const char* target = std::getenv("WF_TEST_THROW_ON_RANK");
  if (target != nullptr && std::atoi(target) == rank) {
    throw wf::Error(fmt::format("deliberate failure on rank {} (WF_TEST_THROW_ON_RANK)", rank));
  }
}

}  // namespace

namespace Catch {
std::ostream& cout() { return g_quiet_rank ? g_report() : std::cout; }
std::ostream& cerr() { return g_quiet_rank ? g_report() : std::cerr; }
std::ostream& clog() { return g_quiet_rank ? g_report() : std::clog; }
}  // namespace Catch

int main(int argc, char** argv) {
  return wf::comm::run_main(argc, argv, [&] {
    wf::comm::Runtime& runtime = wf::comm::Runtime::get();
    g_quiet_rank = runtime.rank() != 0;
    // Its own communicator, made before any test runs: nothing a test does can disturb it.
    const std::shared_ptr<wf::comm::Group> summary = runtime.split("test_dist.summary", 0, runtime.rank());
    maybe_fail_on_purpose(runtime.rank());

    Catch::Session session;
    if (const int status = session.applyCommandLine(argc, argv); status != 0) return status;
    const int failures = session.run();

    wf::Tensor failed = wf::Tensor::from_vector(std::vector<std::int32_t>{failures != 0 ? 1 : 0}, {1});
    const std::vector<std::int32_t> failed_by_rank = summary->all_gather(failed).to_vector<std::int32_t>();
    std::vector<int> failed_ranks;
    for (int r = 0; r < runtime.world_size(); ++r) {
      if (failed_by_rank[static_cast<std::size_t>(r)] != 0) failed_ranks.push_back(r);
    }
    if (failures != 0 && runtime.rank() != 0) {
      std::cout << fmt::format("==== test_dist: report of rank {} of {} ====\n{}", runtime.rank(),
                               runtime.world_size(), g_report().str())
                << std::flush;
    }
    if (runtime.rank() == 0 && runtime.world_size() > 1) {
      std::cout << (failed_ranks.empty()
                        ? fmt::format("test_dist: all {} ranks passed\n", runtime.world_size())
                        : fmt::format("test_dist: FAILED on ranks [{}] of {}\n", fmt::join(failed_ranks, ", "),
                                      runtime.world_size()))
                << std::flush;
    }
    return failed_ranks.empty() ? 0 : 1;
  });
}
