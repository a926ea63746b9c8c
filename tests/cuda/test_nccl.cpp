// The NCCL transport in a world of one (no mpirun) on cuda:0:
//   - every primitive of Group on cuda tensors, through the NCCL communicators CommGrid::use_device
//     splits from the world's, against the same call on CPU tensors (MPI), with the same traffic;
//   - a group with a communicator of its own (make_nccl_backend), created and destroyed, and the
//     error that names a device that does not exist;
//   - a request whose consumer stream waits for it on the device: no host synchronisation, and
//     the consumer sees what the operation delivered, although the data it sends is written last
//     behind a long queue of work.
// In a world of one every result is a copy of the input (a sum over one rank, a gather of one
// piece), so the GPU's results equal the CPU's bit for bit. In a build without NCCL each case
// checks instead that asking for it fails with the fix.
#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "wallfacer/comm/nccl.h"
#include "wallfacer/comm/runtime.h"

using Catch::Contains;
using wf::Device;
using wf::DType;
using wf::Tensor;
using wf::cuda_test::gpu;
using wf::cuda_test::require_equal;
namespace comm = wf::comm;

namespace {

// True when this build has NCCL; otherwise asserts that asking for it names the fix.
bool nccl_built() {
  if (comm::nccl_available()) return true;
  comm::Runtime::init();
  REQUIRE_THROWS_WITH(comm::make_nccl_backend(comm::Runtime::get().world(), 0),
                      Contains("NCCL") && Contains("comm.gpu_transport: staged"));
  return false;
}

// A grid of this one process whose every group moves cuda:0's tensors with NCCL. Made once (a
// dozen communicators) and never destroyed: static destruction would run after the CUDA runtime
// may have begun its own teardown.
comm::CommGrid& nccl_grid() {
  static comm::CommGrid* grid = [] {
    comm::Runtime::init();
    auto* g = new comm::CommGrid(comm::ProcessGrid(comm::ParallelConfig{}, 1, 0));
    const comm::TransportChoice choice = g->use_device(gpu(), comm::GpuTransport::nccl);
    REQUIRE(choice.transport == comm::GpuTransport::nccl);
    return g;
  }();
  return *grid;
}

Tensor input(const wf::Shape& shape, std::uint64_t salt, DType dtype, Device device) {
  return wf::cuda_test::random_normal(shape, wf::cuda_test::fresh_seed(salt), dtype).to(device);
}

struct Outcome {
  std::vector<std::string> names;
  std::vector<Tensor> results;  // on the CPU
  std::vector<comm::Traffic> traffic;  // per primitive, what the calls added to the group's counters

  void add(std::string name, const Tensor& t) {
    names.push_back(std::move(name));
    results.push_back(t.to(Device::cpu()));
  }
};

// Every primitive of `g` on tensors of `device` (the same inputs on every device): the results,
// copied to the CPU, and the traffic the calls counted.
Outcome every_primitive(comm::Group& g, Device device) {
  std::vector<comm::Traffic> before;
  for (int p = 0; p < static_cast<int>(comm::Primitive::count); ++p) {
    before.push_back(g.traffic().get(static_cast<comm::Primitive>(p)));
  }
  Outcome out;
  const wf::Stream current = wf::Stream::current(device);
  const int self = g.rank();

  const Tensor x = input({6, 5}, 1, DType::f32, device);
  Tensor received = Tensor::zeros({6, 5}, DType::f32, device);
  g.sendrecv(x, self, received, self);
  out.add("sendrecv", received);
  Tensor received_later = Tensor::zeros({6, 5}, DType::f32, device);
  comm::Request exchange = g.isendrecv(x, self, received_later, self);
  exchange.make_wait(current);
  out.add("isendrecv", received_later);

  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const comm::ReduceOp op : {comm::ReduceOp::sum, comm::ReduceOp::max, comm::ReduceOp::avg}) {
      Tensor t = input({7, 3}, 2, dtype, device);
      g.all_reduce(t, op);
      out.add(fmt::format("all_reduce {} {}", comm::reduce_op_name(op), wf::dtype_name(dtype)), t);
    }
  }
  Tensor reduced_later = input({1000}, 3, DType::f32, device);
  comm::Request reduction = g.iall_reduce(reduced_later, comm::ReduceOp::sum);
  reduction.wait();  // the host form of waiting; make_wait is the device form
  out.add("iall_reduce", reduced_later);

  const Tensor piece = input({4, 3}, 4, DType::bf16, device);
  Tensor gathered = Tensor::zeros({4 * g.size(), 3}, DType::bf16, device);
  g.all_gather(piece, gathered);
  out.add("all_gather", gathered);
  Tensor gathered_later = Tensor::zeros({4 * g.size(), 3}, DType::bf16, device);
  comm::Request gather = g.iall_gather(piece, gathered_later);
  gather.make_wait(current);
  out.add("iall_gather", gathered_later);
  Tensor gathered_v = Tensor::zeros({4 * g.size(), 3}, DType::bf16, device);
  g.all_gather_v(piece, gathered_v, std::vector<std::int64_t>(static_cast<std::size_t>(g.size()), 4));
  out.add("all_gather_v", gathered_v);
  out.add("all_gather_v (allocating)", g.all_gather_v(piece));

  const Tensor whole = input({6 * g.size(), 2}, 5, DType::f32, device);
  Tensor scattered = Tensor::zeros({6, 2}, DType::f32, device);
  g.reduce_scatter(whole, scattered);
  out.add("reduce_scatter", scattered);
  Tensor scattered_later = Tensor::zeros({6, 2}, DType::f32, device);
  comm::Request scatter = g.ireduce_scatter(whole, scattered_later, comm::ReduceOp::max);
  scatter.make_wait(current);
  out.add("ireduce_scatter", scattered_later);

  const Tensor slices = input({3 * g.size(), 4}, 6, DType::f64, device);
  Tensor exchanged = Tensor::zeros({3 * g.size(), 4}, DType::f64, device);
  g.all_to_all(slices, exchanged);
  out.add("all_to_all", exchanged);

  Tensor shared = input({9}, 7, DType::i64, device);
  g.broadcast(shared, 0);
  out.add("broadcast", shared);
  g.barrier();

  for (int p = 0; p < static_cast<int>(comm::Primitive::count); ++p) {
    comm::Traffic added = g.traffic().get(static_cast<comm::Primitive>(p));
    added.messages_sent -= before[static_cast<std::size_t>(p)].messages_sent;
    added.bytes_sent -= before[static_cast<std::size_t>(p)].bytes_sent;
    added.messages_received -= before[static_cast<std::size_t>(p)].messages_received;
    added.bytes_received -= before[static_cast<std::size_t>(p)].bytes_received;
    out.traffic.push_back(added);
  }
  return out;
}

}  // namespace

TEST_CASE("nccl: every primitive of a group on cuda tensors matches the CPU, with the same traffic",
          "[cuda][nccl]") {
  if (!nccl_built()) return;
  comm::Group& world = nccl_grid().group("world");
  REQUIRE(world.transport_name(gpu()) == "nccl");
  const Outcome on_gpu = every_primitive(world, gpu());
  const Outcome on_cpu = every_primitive(world, Device::cpu());
  REQUIRE(on_gpu.results.size() == on_cpu.results.size());
  for (std::size_t i = 0; i < on_gpu.results.size(); ++i) {
    require_equal(on_gpu.results[i], on_cpu.results[i], on_gpu.names[i]);
  }
  for (int p = 0; p < static_cast<int>(comm::Primitive::count); ++p) {
    INFO(comm::primitive_name(static_cast<comm::Primitive>(p)));
    CHECK(on_gpu.traffic[static_cast<std::size_t>(p)] == on_cpu.traffic[static_cast<std::size_t>(p)]);
  }
}

TEST_CASE("nccl: every group of a grid is split from the world's communicator", "[cuda][nccl]") {
  if (!nccl_built()) return;
  comm::CommGrid& grid = nccl_grid();
  for (std::string_view kind : comm::ProcessGrid::group_names()) {
    INFO(kind);
    comm::Group& g = grid.group(kind);
    CHECK(g.transport_name(gpu()) == "nccl");
    const Tensor host = wf::cuda_test::random_normal({5, 2}, wf::cuda_test::fresh_seed(8));
    Tensor t = host.to(gpu());
    g.all_reduce(t, comm::ReduceOp::sum);
    require_equal(t, host, std::string(kind));
  }
}

TEST_CASE("nccl: a group with a communicator of its own, created and destroyed", "[cuda][nccl]") {
  if (!nccl_built()) return;
  comm::Runtime& runtime = comm::Runtime::init();
  std::shared_ptr<comm::Group> group = runtime.split("nccl.own", 0, 0);
  REQUIRE(group != nullptr);
  REQUIRE_THROWS_WITH(comm::make_nccl_backend(*group, 63), Contains("cuda:63") && Contains("nccl.own"));
  {
    std::shared_ptr<comm::Backend> backend = comm::make_nccl_backend(*group, gpu().index);
    CHECK(backend->name() == "nccl");
    group->set_device_transport(backend, gpu());
    CHECK(group->transport_name(gpu()) == "nccl");
    const Tensor host = wf::cuda_test::random_normal({8, 3}, wf::cuda_test::fresh_seed(9));
    const Tensor gathered = group->all_gather(host.to(gpu()));
    require_equal(gathered, host, "all_gather on a communicator of its own");
    group->set_device_transport(nullptr, gpu());
  }  // the last reference: the communicator is destroyed once the comm stream is idle
  CHECK(group->transport_name(gpu()) == "staged");
  require_equal(Tensor::ones({4}, DType::f32, gpu()), Tensor::ones({4}), "the device after the destruction");
}

TEST_CASE("nccl: a request's consumer stream waits on the device, not the host", "[cuda][nccl]") {
  if (!nccl_built()) return;
  comm::Group& world = nccl_grid().group("world");
  constexpr std::int64_t kN = std::int64_t{1} << 24;
  Tensor outgoing = Tensor::empty({kN}, DType::f32, gpu());
  Tensor incoming = Tensor::zeros({kN}, DType::f32, gpu());
  Tensor seen = Tensor::zeros({kN}, DType::f32, gpu());
  const wf::Stream consumer = wf::Stream::create(gpu());
  wf::synchronize(gpu());  // the allocations are behind every stream
  const std::int64_t syncs = wf::host_sync_count();
  // The value to deliver, 3, is written last, behind a long queue of work on the main stream (about
  // a gigabyte of traffic): the comm stream must wait for it, and the consumer for the exchange.
  outgoing.fill_(1.0);
  for (int i = 0; i < 20; ++i) outgoing.copy_(outgoing.to(DType::f64).to(DType::f32));
  outgoing.fill_(3.0);
  comm::Request exchange = world.isendrecv(outgoing, world.rank(), incoming, world.rank());
  wf::Event done;
  {
    const wf::StreamGuard guard(consumer);
    exchange.make_wait(consumer);
    seen.copy_(incoming);
    done.record(consumer);
  }
  CHECK(wf::host_sync_count() == syncs);  // nothing above waited on the host
  done.synchronize();
  const Tensor host = seen.to(Device::cpu());
  CHECK(host.at(0) == 3.0);
  CHECK(host.at(kN / 2) == 3.0);
  CHECK(host.at(kN - 1) == 3.0);
}
