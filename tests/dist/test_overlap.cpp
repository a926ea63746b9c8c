// The progress thread (src/comm/progress.h): non-blocking P2P completes while the caller
// computes without making any MPI call, the data is right, and the thread is safe beside
// callers that test and wait on the same requests. Only functional properties are asserted:
// how much communication hides behind compute is measured by `wallfacer bench comm --overlap`.
#include <chrono>
#include <thread>

#include "dist_testing.h"
#include "kernels/cpu/gemm.h"
#include "src/comm/progress.h"  // internal: the mode switch and the count of watched operations

using wf::DType;
using wf::Shape;
using wf::Tensor;
using wf::comm::ProgressMode;
using wf::comm::Request;
using namespace wf::test;

namespace {

// Sets the progress mode for one scope, whatever WF_COMM_PROGRESS says.
class ProgressModeScope {
 public:
  explicit ProgressModeScope(ProgressMode mode) : saved_(wf::comm::progress_mode()) { wf::comm::set_progress_mode(mode); }
  ~ProgressModeScope() { wf::comm::set_progress_mode(saved_); }

 private:
  ProgressMode saved_;
};

bool mpi_has_thread_multiple() {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided >= MPI_THREAD_MULTIPLE;
}

// Products of two small matrices, repeated until `done()` or the deadline: a kernel that
// knows nothing about MPI. Returns whether done() became true.
template <typename Done>
bool compute_until(Done done, std::chrono::seconds limit) {
  const std::int64_t n = 64;
  Tensor a = Tensor::randn_at({n, n}, 5, 0), b = Tensor::randn_at({n, n}, 5, 1 << 20), c = Tensor::zeros({n, n});
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    wf::kernels::cpu::gemm<float>(false, false, n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n, 0.0f,
                                  c.data<float>(), n);
    if (done()) return true;
  }
  return false;
}

// The thread drops completed operations on its next pass (within ~50 µs, longer on a loaded
// machine): whether it got there within `limit`.
bool progress_goes_idle(std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (wf::comm::progress_tracked_count() != 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

}  // namespace

TEST_CASE("progress mode: thread or off, anything else is an error naming both", "[dist][progress]") {
  CHECK(wf::comm::parse_progress_mode("thread") == ProgressMode::thread);
  CHECK(wf::comm::parse_progress_mode("off") == ProgressMode::off);
  CHECK_THAT(error_of([] { wf::comm::parse_progress_mode("on"); }),
             Catch::Contains("progress mode 'on'") && Catch::Contains("'thread'") && Catch::Contains("'off'"));
  CHECK(std::string(wf::comm::progress_mode_name(ProgressMode::off)) == "off");
  const ProgressModeScope off(ProgressMode::off);
  CHECK(wf::comm::progress_mode() == ProgressMode::off);
}

TEST_CASE("with the progress thread, a ring exchange completes while every rank computes", "[dist][progress]") {
  if (!mpi_has_thread_multiple()) return;  // the thread stays off (with a warning)
  const ProgressModeScope thread(ProgressMode::thread);
  auto group = world_group("t.progress_ring");
  const int C = group->size(), me = group->rank();
  const Shape shape{256, 1024};  // 1 MiB of f32: a rendezvous message on every transport
  Tensor received = Tensor::zeros(shape, DType::f32);
  Request request = group->isendrecv(input_of(me, shape, DType::f32, 40), (me + 1) % C, received, (me + C - 1) % C, 4);
  // No MPI call until the thread has finished the operation: only it can have moved the data.
  // (The deadline only bounds a failure; the exchange normally finishes within milliseconds.)
  CHECK(compute_until([] { return wf::comm::progress_tracked_count() == 0; }, std::chrono::seconds(20)));
  CHECK(request.test());
  request.wait();
  CHECK(mismatch(received, input_of((me + C - 1) % C, shape, DType::f32, 40)) == "");
}

TEST_CASE("the progress thread and the caller test and wait on the same requests safely", "[dist][progress]") {
  // Every pair exchanges in both directions while the caller polls test() (the thread then
  // skips the operation the caller holds) and finally waits on whatever is left.
  const ProgressModeScope thread(ProgressMode::thread);
  auto group = world_group("t.progress_shared");
  const int C = group->size(), me = group->rank();
  const Shape shape{64, 512};  // 128 KiB
  for (int round = 0; round < 3; ++round) {
    std::vector<Tensor> inbox;
    std::vector<Request> requests;
    for (int peer = 0; peer < C; ++peer) inbox.push_back(Tensor::zeros(shape, DType::f32));
    for (int peer = 0; peer < C; ++peer) {
      requests.push_back(group->irecv(inbox[static_cast<std::size_t>(peer)], peer, round));
    }
    for (int peer = 0; peer < C; ++peer) requests.push_back(group->isend(input_of(me, shape, DType::f32, 50 + peer), peer, round));
    for (int poll = 0; poll < 50; ++poll) {
      for (Request& r : requests) r.test();
    }
    for (Request& r : requests) r.wait();
    for (int peer = 0; peer < C; ++peer) {
      INFO("round " << round << ", from rank " << peer);
      CHECK(mismatch(inbox[static_cast<std::size_t>(peer)], input_of(peer, shape, DType::f32, 50 + me)) == "");
    }
  }
  CHECK(progress_goes_idle(std::chrono::seconds(20)));  // completed by the caller, then let go by the thread
}

TEST_CASE("with progress off, nothing is watched and wait still completes the exchange", "[dist][progress]") {
  const ProgressModeScope off(ProgressMode::off);
  CHECK(progress_goes_idle(std::chrono::seconds(20)));  // earlier cases' operations are gone
  auto group = world_group("t.progress_off");
  const int C = group->size(), me = group->rank();
  const Shape shape{128, 1024};
  Tensor received = Tensor::zeros(shape, DType::f32);
  Request request = group->isendrecv(input_of(me, shape, DType::f32, 60), (me + 1) % C, received, (me + C - 1) % C, 5);
  CHECK(wf::comm::progress_tracked_count() == 0);
  request.wait();
  CHECK(mismatch(received, input_of((me + C - 1) % C, shape, DType::f32, 60)) == "");
}
