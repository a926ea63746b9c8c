// The test device's stand-in for NCCL (transport.h): a StreamBackend whose operations run, in the
// order of the test device's communication stream, as MPI calls on a duplicate of the group's
// communicator. With the test device's streams asynchronous (worker threads with random delays),
// the comm stream really runs beside the compute stream, so a missing event wait between them
// gives wrong values, and code that relies on MPI's tags or on an isend / irecv pair completing
// out of order hangs here as it would on NCCL (and the watchdog names it).
//
// MPI reads host memory: each operation copies its device buffers to host tensors inside the test
// device's access scope, runs MPI outside it (so the arena stays protected while MPI waits), and
// copies what it received back.
#include <cstring>
#include <memory>
#include <vector>

#include "src/comm/mpi_backend.h"
#include "src/comm/stream_backend.h"
#include "src/core/test_device.h"
#include "src/core/test_device_streams.h"
#include "wallfacer/comm/group.h"
#include "wallfacer/comm/transport.h"
#include "wallfacer/core/error.h"

namespace wf::comm {
namespace {

// NCCL has no tags: every message of this transport uses the same one, so messages between two
// ranks match in the order they were issued, as on NCCL.
constexpr int kNoTag = 0;

Tensor host_copy(const Tensor& t) {
  Tensor host = Tensor::empty(t.shape(), t.dtype(), Device::cpu());
  detail::TestDeviceAccess access;
  std::memcpy(host.raw_data(), t.raw_data(), t.nbytes());
  return host;
}

void copy_back(const Tensor& t, const Tensor& host) {
  detail::TestDeviceAccess access;
  std::memcpy(const_cast<Tensor&>(t).raw_data(), host.raw_data(), t.nbytes());
}

class TestDeviceTransport final : public StreamBackend {
 public:
  TestDeviceTransport(const Group& group, MPI_Comm duplicate, Stream stream)
      : StreamBackend(group.name(), group.rank(), group.size(), Device::test(), stream),
        mpi_(std::make_shared<MpiBackend>(duplicate, group.name() + " (testdev transport)")) {}

  std::string name() const override { return "nccl-testdev"; }

 protected:
  void issue_p2p(const Stream& comm, const std::vector<P2p>& legs) override {
    detail::test_stream_run(comm, [mpi = mpi_, legs] {
      std::vector<Tensor> hosts;
      std::vector<Request> requests;
      for (const P2p& leg : legs) {
        hosts.push_back(leg.receive ? Tensor::empty(leg.buffer.shape(), leg.buffer.dtype()) : host_copy(leg.buffer));
      }
      // Receives first, as one NCCL group posts every leg before any completes.
      for (std::size_t i = 0; i < legs.size(); ++i) {
        if (legs[i].receive) requests.push_back(mpi->irecv(hosts[i], legs[i].peer, kNoTag));
      }
      for (std::size_t i = 0; i < legs.size(); ++i) {
        if (!legs[i].receive) requests.push_back(mpi->isend(hosts[i], legs[i].peer, kNoTag));
      }
      for (Request& r : requests) r.wait();
      for (std::size_t i = 0; i < legs.size(); ++i) {
        if (legs[i].receive) copy_back(legs[i].buffer, hosts[i]);
      }
    });
  }

  void issue_all_reduce(const Stream& comm, const Tensor& t, ReduceOp op, Form form) override {
    detail::test_stream_run(comm, [mpi = mpi_, t, op, form] {
      Tensor host = host_copy(t);
      if (form == Form::blocking) {
        mpi->all_reduce(host, op);
      } else {
        mpi->iall_reduce(host, op).wait();
      }
      copy_back(t, host);
    });
  }

  void issue_all_gather(const Stream& comm, const Tensor& input, const Tensor& output, Form form) override {
    detail::test_stream_run(comm, [mpi = mpi_, input, output, form] {
      Tensor host_in = host_copy(input), host_out = Tensor::empty(output.shape(), output.dtype());
      if (form == Form::blocking) {
        mpi->all_gather(host_in, host_out);
      } else {
        mpi->iall_gather(host_in, host_out).wait();
      }
      copy_back(output, host_out);
    });
  }

  void issue_reduce_scatter(const Stream& comm, const Tensor& input, const Tensor& output, ReduceOp op,
                            Form form) override {
    detail::test_stream_run(comm, [mpi = mpi_, input, output, op, form] {
      Tensor host_in = host_copy(input), host_out = Tensor::empty(output.shape(), output.dtype());
      if (form == Form::blocking) {
        mpi->reduce_scatter(host_in, host_out, op);
      } else {
        mpi->ireduce_scatter(host_in, host_out, op).wait();
      }
      copy_back(output, host_out);
    });
  }

  void issue_broadcast(const Stream& comm, const Tensor& t, int root) override {
    detail::test_stream_run(comm, [mpi = mpi_, t, root] {
      Tensor host = host_copy(t);
      mpi->broadcast(host, root);
      copy_back(t, host);
    });
  }

 private:
  std::shared_ptr<MpiBackend> mpi_;
};

}  // namespace

std::shared_ptr<Backend> make_test_device_transport(Group& group) {
  return make_test_device_transport(group, comm_stream(Device::test()));
}

std::shared_ptr<Backend> make_test_device_transport(Group& group, const Stream& stream) {
  detail::test_stream_make_asynchronous(stream);
  auto* mpi = dynamic_cast<MpiBackend*>(&group.cpu_backend());
  WF_CHECK(mpi != nullptr, "the test device's transport for group '{}' needs the group's MPI backend, not '{}'",
           group.name(), group.cpu_backend().name());
  MPI_Comm duplicate = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(mpi->comm(), &duplicate), mpi->context("MPI_Comm_dup (testdev transport)"));
  return std::make_shared<TestDeviceTransport>(group, duplicate, stream);
}

}  // namespace wf::comm
