// A device's own transport (comm/transport.h), proven on the test device: its stand-in for NCCL
// runs each operation on the device's communication stream (src/comm/stream_backend.h), with the
// test device's streams as worker-thread queues with random delays. So the compute and comm
// streams really run beside each other, and
//   - every primitive gives the bytes and the traffic counters of the same call on CPU tensors,
//     without the host waiting (host_sync_count unchanged);
//   - a stream that does not wait for a transfer reads stale values (the test that a missing
//     wait fails), and one that waits (Request::make_wait) reads the transfer's;
//   - ring, Ulysses, WallFacer (C 1 and 2) and the hybrid give the CPU's bits on device tensors
//     with no host synchronisation in their forward and backward, their traffic equal to the
//     model's (run_sp_case checks it); the staged transport gives the same bits. So do ring,
//     WallFacer and the hybrid with packed documents whose rings skip steps (document_ring_steps.h):
//     hops over several ranks, and accumulators sent home from a step before the last.
#include <cstring>

#include "dist_testing.h"
#include "sp_testing.h"
#include "src/comm/stream_backend.h"
#include "src/core/test_device_streams.h"
#include "wallfacer/comm/transport.h"
#include "wallfacer/core/stream.h"

using wf::Device;
using wf::DType;
using wf::Shape;
using wf::Tensor;
using wf::comm::Request;
using wf::parallel::SpStrategy;
using namespace wf::test;

namespace {

// A world group whose test-device tensors take the test device's own transport.
std::shared_ptr<wf::comm::Group> group_with_transport(const std::string& name) {
  auto group = world_group(name);
  group->set_device_transport(wf::comm::make_test_device_transport(*group), Device::test());
  return group;
}

// Every primitive once on `group`, on tensors of `device` made from the same inputs; the results
// brought to the CPU afterwards. *host_syncs: the host synchronisations of the calls themselves.
std::vector<Tensor> every_primitive(wf::comm::Group& group, Device device, DType dtype, std::int64_t* host_syncs) {
  const int P = group.size(), me = group.rank();
  const Shape shape{static_cast<std::int64_t>(P) * 3, 5};
  const Tensor x = input_of(me, shape, dtype, 7).to(device);
  Tensor reduced = x.clone(), ireduced = x.clone(), broadcast = x.clone();
  Tensor gathered = Tensor::empty({shape[0] * P, 5}, dtype, device), igathered = gathered.clone();
  Tensor scattered = Tensor::empty({3, 5}, dtype, device), iscattered = scattered.clone();
  Tensor exchanged = Tensor::empty(shape, dtype, device), swapped = Tensor::empty(shape, dtype, device);
  Tensor received = Tensor::empty(shape, dtype, device);
  std::vector<std::int64_t> rows;
  for (int r = 0; r < P; ++r) rows.push_back(r % 3);  // rank 0 and every third contribute nothing
  std::int64_t total_rows = 0;
  for (std::int64_t n : rows) total_rows += n;
  Tensor gathered_v = Tensor::empty({total_rows, 5}, dtype, device);
  const Tensor piece = x.slice0(0, rows[static_cast<std::size_t>(me)]);
  const bool reducible = dtype != DType::i64;
  wf::synchronize(device);

  const std::int64_t before = wf::host_sync_count();
  const int next = (me + 1) % P, previous = (me + P - 1) % P;
  group.all_reduce(reduced);
  Request ireduce = group.iall_reduce(ireduced, wf::comm::ReduceOp::max);
  group.all_gather(x, gathered);
  Request igather = group.iall_gather(x, igathered);
  if (reducible) group.reduce_scatter(x, scattered);
  Request iscatter = reducible ? group.ireduce_scatter(x, iscattered) : Request();
  group.all_gather_v(piece, gathered_v, rows);
  group.all_to_all(x, swapped);
  group.broadcast(broadcast, P - 1);
  group.sendrecv(x, next, exchanged, previous);
  Request ring = group.isendrecv(x, previous, received, next);
  const wf::Stream compute = wf::Stream::current(device);
  for (Request* r : {&ireduce, &igather, &iscatter, &ring}) r->make_wait(compute);
  *host_syncs = wf::host_sync_count() - before;

  std::vector<Tensor> out{reduced, ireduced, gathered, igathered, gathered_v, swapped, broadcast, exchanged, received};
  if (reducible) {
    out.push_back(scattered);
    out.push_back(iscattered);
  }
  for (Tensor& t : out) t = t.to(Device::cpu());
  return out;
}

// The test device's communication stream slowed down for one scope (test_stream_slow_down).
class SlowCommStream {
 public:
  explicit SlowCommStream(int us) { wf::detail::test_stream_slow_down(wf::comm::comm_stream(Device::test()), us); }
  ~SlowCommStream() { wf::detail::test_stream_slow_down(wf::comm::comm_stream(Device::test()), 0); }
  SlowCommStream(const SlowCommStream&) = delete;
  SlowCommStream& operator=(const SlowCommStream&) = delete;
};

}  // namespace

TEST_CASE("the test device's own transport gives every primitive's CPU bytes and traffic, with no host wait",
          "[dist][testdev][transport]") {
  const AsyncTestDevice async(100);
  auto group = group_with_transport("t.transport");
  CHECK(group->transport_name(Device::test()) == "nccl-testdev");
  for (const DType dtype : {DType::f32, DType::bf16, DType::i64}) {
    INFO(wf::dtype_name(dtype));
    std::int64_t cpu_syncs = 0, device_syncs = 0;
    group->traffic().reset();
    const std::vector<Tensor> want = every_primitive(*group, Device::cpu(), dtype, &cpu_syncs);
    const wf::comm::Traffic cpu_traffic = group->traffic().total();
    group->traffic().reset();
    const std::vector<Tensor> got = every_primitive(*group, Device::test(), dtype, &device_syncs);
    CHECK(group->traffic().total() == cpu_traffic);
    CHECK(device_syncs == 0);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("result " << i);
      CHECK(same_bytes(got[i], want[i]));
    }
  }
}

TEST_CASE("a stream that skips the wait for a transfer reads stale values; Request::make_wait orders it",
          "[dist][testdev][transport]") {
  const AsyncTestDevice async(0);
  auto group = group_with_transport("t.transport_wait");
  const int P = group->size(), me = group->rank();
  const int next = (me + 1) % P, previous = (me + P - 1) % P;
  const Tensor zeros = Tensor::zeros({256}, DType::f32);
  const Tensor x = Tensor::full({256}, me + 1.0, DType::f32, Device::test());
  Tensor received = zeros.to(Device::test());
  wf::synchronize(Device::test());
  // The comm stream sleeps before the exchange; the compute stream's copy right after posting it
  // runs first, because nothing orders it after the transfer.
  wf::detail::test_stream_stall(wf::comm::comm_stream(Device::test()), 300);
  Request exchange = group->isendrecv(x, next, received, previous);
  const Tensor unordered = received.clone();
  exchange.make_wait(wf::Stream::current(Device::test()));
  const Tensor ordered = received.clone();
  CHECK(same_bytes(unordered, zeros));
  CHECK(same_bytes(ordered, Tensor::full({256}, previous + 1.0, DType::f32)));
  // A blocking call leaves the current stream waiting for it: what follows reads its result.
  Tensor sum = Tensor::full({4}, 1.0, DType::f32, Device::test());
  wf::detail::test_stream_stall(wf::comm::comm_stream(Device::test()), 100);
  group->all_reduce(sum);
  CHECK(same_bytes(sum.clone(), Tensor::full({4}, static_cast<double>(P), DType::f32)));
}

TEST_CASE("every sp strategy on test-device tensors over the device's own transport gives the CPU's bits, with no "
          "host synchronisation",
          "[dist][testdev][transport][sp]") {
  const int P = wf::test::runtime().world_size();
  std::vector<SpCase> cases;
  const auto add = [&](SpStrategy strategy, int C, int U) {
    SpCase c;
    c.strategy = strategy;
    c.C = C;
    c.U = U;
    c.B = 1;
    c.h = 2 * P;  // Ulysses needs P | h
    c.h_kv = P;
    c.d = 8;
    c.dtype = DType::f32;
    c.N = 6 * P;
    c.seed = 29;
    cases.push_back(c);
  };
  add(SpStrategy::ring, 1, 1);
  add(SpStrategy::ulysses, 1, 1);
  for (int C : wf::comm::valid_team_sizes(P)) {
    if (C <= 2) add(SpStrategy::wallfacer, C, 1);
  }
  if (P % 2 == 0 && P > 2) add(SpStrategy::ulysses_wallfacer, 1, 2);
  // Packed documents of 4 tokens over contiguous ranks of 6: the forward keeps steps 0 and 1, and
  // the accumulators go home from step 1 (WallFacer's backward: from step G − 1, one hop back);
  // of 6 tokens over zigzag chunks of 3: steps 0, 1 and P − 1, a hop over P − 2 ranks.
  const std::size_t unpacked = cases.size();
  for (std::size_t i = 0; i < unpacked; ++i) {
    if (cases[i].strategy == SpStrategy::ulysses || cases[i].C > 1) continue;
    for (const std::int64_t length : {4, 6}) {
      SpCase c = cases[i];
      c.doc_bounds = {packed(c.N, {length})};
      c.layout = length == 4 ? wf::parallel::SequenceLayout::contiguous : wf::parallel::SequenceLayout::zigzag;
      if (c.strategy == SpStrategy::ring && P > 3) {
        CHECK(expected_ring_hops(c, P, wf::parallel::Pass::forward) == (length == 4 ? 1 : 2));
      }
      cases.push_back(c);
    }
  }
  for (SpCase c : cases) {
    const SpCaseResult want = run_sp_case(c);
    c.device = Device::test();
    {
      // Each transfer takes a millisecond or more while the compute stream runs at once: every wait
      // the strategy needs and skipped would read a buffer before its transfer wrote it.
      const AsyncTestDevice async(50);
      const SlowCommStream slow(1000);
      const SpCaseResult got = run_sp_case(c);
      CHECK(bitwise_equal(got, want));
      CHECK(got.host_syncs == 0);
    }
    if (c.strategy == SpStrategy::ring) {  // the staged path: the same bits, the host waiting
      c.transport = wf::comm::GpuTransport::staged;
      CHECK(bitwise_equal(run_sp_case(c), want));
    }
  }
}
