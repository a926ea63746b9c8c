// CommGrid: the communicators MPI builds hold exactly the ranks the ProcessGrid computes.
#include <fmt/format.h>

#include <numeric>

#include "dist_testing.h"

using wf::DType;
using wf::Tensor;
using wf::comm::CommGrid;
using wf::comm::ParallelConfig;
using wf::comm::ProcessGrid;
using namespace wf::test;

namespace {

// Every named group: same members and rank as the grid, and a sum over it adds exactly those
// world ranks (so the communicator behind it really is that group).
void check_grid(const ParallelConfig& config) {
  const ProcessGrid grid(config, runtime().world_size(), runtime().rank());
  CommGrid comm_grid(grid);
  for (std::string_view name : ProcessGrid::group_names()) {
    INFO(fmt::format("dp{} tp{} pp{} sp{} C={} order {}: group {}", config.dp, config.tp, config.pp, config.sp,
                     config.C, config.order, name));
    wf::comm::Group& group = comm_grid.group(name);
    CHECK(group.name() == name);
    CHECK(group.world_ranks() == grid.group(name));
    CHECK(group.rank() == grid.group_rank(name));
    Tensor t = Tensor::from_vector(std::vector<std::int64_t>{runtime().rank()}, {1});
    group.all_reduce(t);
    const std::vector<int>& members = grid.group(name);
    CHECK(t.item() == std::accumulate(members.begin(), members.end(), 0.0));
  }
  CHECK_THROWS_WITH(comm_grid.group("nope"), Catch::Contains("no group named 'nope'"));
}

ParallelConfig config_of(int dp, int tp, int pp, int sp, int C) {
  ParallelConfig config;
  config.dp = dp, config.tp = tp, config.pp = pp, config.sp = sp, config.C = C;
  return config;
}

}  // namespace

TEST_CASE("CommGrid groups match the ProcessGrid's rank lists", "[dist][grid]") {
  const int W = runtime().world_size();
  check_grid(config_of(1, 1, 1, W, 1));  // every world size: one sp group
  check_grid(config_of(W, 1, 1, 1, 1));  // ... or all data parallel
  if (W == 4) {
    check_grid(config_of(2, 1, 1, 2, 1));
    check_grid(config_of(1, 1, 1, 4, 2));
  }
  if (W == 8) {
    check_grid(config_of(2, 2, 1, 2, 1));  // dp2·tp2·sp2
    ParallelConfig reordered = config_of(2, 2, 1, 2, 1);
    reordered.order = "dp-tp-sp-pp";
    check_grid(reordered);
    check_grid(config_of(1, 1, 1, 8, 2));  // sp8, C = 2
    ParallelConfig p2p = config_of(1, 1, 1, 8, 2);
    p2p.placement = wf::comm::Placement::p2p_intra;
    check_grid(p2p);
    check_grid(config_of(1, 2, 2, 2, 1));
  }
}

TEST_CASE("CommGrid refuses a grid for another world", "[dist][grid]") {
  if (runtime().world_size() != 2) {
    const ProcessGrid grid(config_of(1, 1, 1, 2, 1), 2, 0);
    CHECK_THROWS_WITH(CommGrid(grid), Catch::Contains("the process grid is for rank 0 of 2"));
  }
}

TEST_CASE("CommGrid of one rank is process-local in any world", "[dist][grid]") {
  CommGrid local(ProcessGrid(config_of(1, 1, 1, 1, 1), 1, 0));
  for (std::string_view name : ProcessGrid::group_names()) {
    INFO(name);
    wf::comm::Group& group = local.group(name);
    CHECK(group.size() == 1);
    CHECK(group.world_ranks() == std::vector<int>{runtime().rank()});
    Tensor t = Tensor::from_vector(std::vector<std::int64_t>{runtime().rank() + 1}, {1});
    group.all_reduce(t);
    CHECK(t.item() == runtime().rank() + 1);  // nobody else's value arrived
  }
}
