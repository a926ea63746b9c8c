// Traffic accounting: the counters themselves (no communication), and their sum over ranks.
#include "dist_testing.h"

using wf::Tensor;
using wf::comm::Primitive;
using wf::comm::Traffic;
using wf::comm::TrafficCounters;
using wf::comm::TrafficRegistry;
using namespace wf::test;

TEST_CASE("counters: a message per non-empty direction, split into P2P and collectives", "[dist][traffic]") {
  TrafficCounters counters;
  counters.record(Primitive::send, 100, 0);
  counters.record(Primitive::send, 0, 0);  // a self-send: no message
  counters.record(Primitive::recv, 0, 40);
  counters.record(Primitive::all_gather, 30, 30);
  counters.record(Primitive::broadcast, 0, 8);
  CHECK(counters.get(Primitive::send) == Traffic{1, 100, 0, 0});
  CHECK(counters.get(Primitive::recv) == Traffic{0, 0, 1, 40});
  CHECK(counters.p2p() == Traffic{1, 100, 1, 40});
  CHECK(counters.collectives() == Traffic{1, 30, 2, 38});
  CHECK(counters.total() == Traffic{2, 130, 3, 78});
  CHECK(counters.get(Primitive::barrier) == Traffic{});
  counters.reset();
  CHECK(counters.total() == Traffic{});
}

TEST_CASE("registry: one set of counters per group name, snapshots and reset", "[dist][traffic]") {
  TrafficRegistry& registry = TrafficRegistry::instance();
  TrafficCounters& a = registry.counters("t.registry.a");
  CHECK(&a == &registry.counters("t.registry.a"));  // the same counters on every lookup
  a.reset();
  a.record(Primitive::recv, 0, 16);
  a.record(Primitive::all_reduce, 24, 24);
  CHECK(registry.get("t.registry.a", Primitive::recv) == Traffic{0, 0, 1, 16});
  CHECK(registry.get("t.registry.never-made", Primitive::recv) == Traffic{});
  CHECK(registry.snapshot().at("t.registry.a") == Traffic{1, 24, 2, 40});
  CHECK(registry.snapshot(true, false).at("t.registry.a") == Traffic{0, 0, 1, 16});
  CHECK(registry.snapshot(false, true).at("t.registry.a") == Traffic{1, 24, 1, 24});
  registry.reset();
  CHECK(registry.snapshot().at("t.registry.a") == Traffic{});
}

TEST_CASE("a group counts under its name in the registry", "[dist][traffic]") {
  auto group = world_group("t.registered");
  Tensor t = Tensor::ones({4}, wf::DType::f32);
  group->all_reduce(t);
  const std::int64_t volume = 2 * (group->size() - 1) * 16 / group->size();
  CHECK(TrafficRegistry::instance().get("t.registered", Primitive::all_reduce) == one_call(volume, volume));
}

TEST_CASE("sum_over_ranks adds every rank's counters without counting itself", "[dist][traffic]") {
  auto group = world_group("t.sum_over_ranks");
  const int C = group->size(), me = group->rank();
  Tensor received = Tensor::zeros({5}, wf::DType::f64);
  group->sendrecv(Tensor::ones({5}, wf::DType::f64), (me + 1) % C, received, (me + C - 1) % C);
  const Traffic mine = group->traffic().total();
  const Traffic all = sum_over_ranks(*group, mine);
  // Every rank sent 40 bytes to its neighbour (nothing in a world of one).
  CHECK(all == (C > 1 ? Traffic{C, 40 * C, C, 40 * C} : Traffic{}));
  CHECK(group->traffic().total() == mine);
}
