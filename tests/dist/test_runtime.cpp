// The runtime: where this rank runs, the world group, splitting groups, and the knobs of the
// watchdog and argument checks.
#include <fmt/format.h>

#include <chrono>
#include <numeric>

#include "dist_testing.h"
#include "kernels/cpu/gemm.h"
#include "src/comm/mpi_util.h"  // internal: the one MPI error helper
#include "wallfacer/core/cuda_info.h"
#include "wallfacer/core/threading.h"

using wf::DType;
using wf::Tensor;
using namespace wf::test;

TEST_CASE("the runtime knows the rank, the world, the node and the device", "[dist][runtime]") {
  wf::comm::Runtime& rt = runtime();
  CHECK(wf::comm::Runtime::initialized());
  CHECK(&wf::comm::Runtime::init() == &rt);  // init is idempotent
  CHECK(rt.rank() >= 0);
  CHECK(rt.rank() < rt.world_size());
  CHECK(rt.local_rank() >= 0);
  CHECK(rt.local_rank() < rt.local_size());
  CHECK(rt.local_size() <= rt.world_size());
  CHECK(rt.threads() == wf::num_threads());
  const auto gpus = wf::cuda_devices();
  CHECK(rt.device() == (gpus.empty() ? wf::Device::cpu()
                                     : wf::Device::cuda(rt.local_rank() % static_cast<int>(gpus.size()))));

  wf::comm::Group& world = rt.world();
  CHECK(world.name() == "world");
  CHECK(world.size() == rt.world_size());
  CHECK(world.rank() == rt.rank());
  std::vector<int> everyone(static_cast<std::size_t>(rt.world_size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  CHECK(world.world_ranks() == everyone);

  // Every rank of a node sees the same local size; local ranks 0..local_size−1 exist once.
  auto group = world_group("t.runtime.node");
  Tensor local = Tensor::from_vector(std::vector<std::int64_t>{rt.local_size(), rt.local_rank() == 0 ? 1 : 0}, {1, 2});
  const std::vector<std::int64_t> all = group->all_gather(local).to_vector<std::int64_t>();
  std::int64_t nodes = 0, ranks_counted = 0;
  for (std::size_t r = 0; r < all.size(); r += 2) nodes += all[r + 1];
  for (std::size_t r = 0; r < all.size(); r += 2) ranks_counted += all[r + 1] * all[r];
  CHECK(nodes >= 1);
  CHECK(ranks_counted == rt.world_size());  // (ranks of each node's leader) summed = world
}

TEST_CASE("every rank runs the GEMM backend rank 0 chose", "[dist][runtime]") {
  // Runtime::init broadcast rank 0's choice, so replicated products round alike on every rank.
  auto group = world_group("t.runtime.gemm");
  const auto backend = static_cast<std::int64_t>(wf::kernels::cpu::default_gemm_backend());
  const std::vector<std::int64_t> all =
      group->all_gather(Tensor::from_vector(std::vector<std::int64_t>{backend}, {1})).to_vector<std::int64_t>();
  for (std::int64_t b : all) CHECK(b == all[0]);
  CHECK_FALSE(wf::kernels::cpu::gemm_choice().reason.empty());
}

TEST_CASE("split: colors make groups ordered by key; a negative color makes none", "[dist][runtime]") {
  wf::comm::Runtime& rt = runtime();
  const int me = rt.rank(), W = rt.world_size();
  // Even and odd world ranks, each group in reverse rank order.
  auto parity = rt.split("t.split.parity", me % 2, W - me);
  REQUIRE(parity != nullptr);
  std::vector<int> expected;
  for (int r = W - 1; r >= 0; --r) {
    if (r % 2 == me % 2) expected.push_back(r);
  }
  CHECK(parity->world_ranks() == expected);
  CHECK(parity->world_ranks()[static_cast<std::size_t>(parity->rank())] == me);
  Tensor t = Tensor::from_vector(std::vector<std::int64_t>{me}, {1});
  parity->all_reduce(t);
  CHECK(t.item() == std::accumulate(expected.begin(), expected.end(), 0.0));

  auto only_zero = rt.split("t.split.zero", me == 0 ? 0 : -1, 0);
  CHECK((only_zero != nullptr) == (me == 0));
  if (only_zero) CHECK(only_zero->world_ranks() == std::vector<int>{0});
}

TEST_CASE("watchdog timeout and argument checks can be set and read", "[dist][runtime]") {
  using namespace std::chrono_literals;
  const auto saved_timeout = wf::comm::watchdog_timeout();
  CHECK(saved_timeout.count() > 0);
  wf::comm::set_watchdog_timeout(1500ms);
  CHECK(wf::comm::watchdog_timeout() == 1500ms);
  CHECK_THROWS_AS(wf::comm::set_watchdog_timeout(0ms), wf::Error);
  wf::comm::set_watchdog_timeout(saved_timeout);

  const bool saved_checks = wf::comm::argument_checks_enabled();
  wf::comm::set_argument_checks(!saved_checks);
  CHECK(wf::comm::argument_checks_enabled() == !saved_checks);
  wf::comm::set_argument_checks(saved_checks);
}

TEST_CASE("MPI error codes become wf::Error with MPI's own text", "[dist][runtime]") {
  CHECK_NOTHROW(wf::comm::check_mpi(MPI_SUCCESS, "nothing"));
  CHECK_THAT(error_of([] { wf::comm::check_mpi(MPI_ERR_COMM, "MPI_Send on group 'x'"); }),
             Catch::Contains("MPI_Send on group 'x': MPI error: " + wf::comm::mpi_error_string(MPI_ERR_COMM)));
  CHECK_THAT(wf::comm::mpi_error_string(MPI_ERR_COMM), Catch::Contains("communicator"));
}
