#pragma once
// The distributed runtime of one process: MPI bootstrap and teardown, where this rank runs
// (rank, world size, ranks on this node), which device it uses and how many CPU threads, the
// world group, and the watchdog that turns a hang into an error.
//
// A program started without mpirun is a world of size 1 and needs no special handling.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "wallfacer/comm/group.h"
#include "wallfacer/comm/process_grid.h"
#include "wallfacer/comm/transport.h"
#include "wallfacer/core/device.h"

namespace wf::comm {

class Runtime {
 public:
  // Initialises MPI with MPI_THREAD_MULTIPLE (once; later calls return the same runtime), reads
  // rank / world size / local rank / local size, picks the device (cuda:local_rank when GPUs are
  // present, else cpu), sets CPU threads to cores / local ranks unless OMP_NUM_THREADS is set,
  // and gives the logger the rank prefix.
  static Runtime& init(int* argc = nullptr, char*** argv = nullptr);
  static bool initialized();
  static Runtime& get();  // wf::Error when init() has not run

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  Device device() const { return device_; }
  int threads() const { return threads_; }
  Group& world();

  // A new group from the world, like MPI_Comm_split (collective over the world): ranks passing
  // the same color form one group, ordered by key (ties by world rank). A negative color joins
  // no group and gets nullptr. Traffic is counted under `name`.
  std::shared_ptr<Group> split(std::string name, int color, int key);

  // Ends the whole job from this rank: prints `message` (with the rank) to stderr and calls
  // MPI_Abort, so no other rank waits forever. Used for uncaught errors and by the watchdog.
  [[noreturn]] void abort(std::string_view message, int exit_code = 1);
  // MPI_Finalize (idempotent; also run at exit).
  void finalize();

 private:
  Runtime() = default;
  bool owns_mpi_ = false;  // false when the program had initialised MPI itself
  bool finalized_ = false;
  int rank_ = 0, world_size_ = 1, local_rank_ = 0, local_size_ = 1, threads_ = 1;
  Device device_;
  std::shared_ptr<Group> world_;
};

// The main of a distributed program: initialises the runtime, runs `body` and finalises. An
// exception escaping `body` ends the whole job: with more than one rank through Runtime::abort
// (so no rank waits forever for the one that failed), in a world of one by printing
// "wallfacer: error: <what>" and returning 1. Returns body's exit status otherwise.
int run_main(int argc, char** argv, const std::function<int()>& body);

// How long a blocking communication call (or Request::wait) may make no progress before the
// watchdog aborts the job with a message naming the group, the primitive and the rank.
// Default 300 s; the environment variable WF_COMM_TIMEOUT (seconds) overrides it.
std::chrono::milliseconds watchdog_timeout();
void set_watchdog_timeout(std::chrono::milliseconds timeout);

// Cheap argument agreement checks: before each collective the ranks exchange a small header
// (primitive, dtype, shape, sequence number) and fail with a clear error on a mismatch that MPI
// would not catch. On in debug builds; WF_COMM_CHECK=1 / 0 forces it on / off.
bool argument_checks_enabled();
void set_argument_checks(bool enabled);

// The pipeline's two links between neighbouring stages: the activations the forward sends on, the
// gradients the backward sends back.
enum class PipelineLink { activations, gradients };

// Every named group of a ProcessGrid as a Group, created once (collective over the world).
// A grid of world size 1 is process-local in any job: each process's groups hold only itself.
class CommGrid {
 public:
  explicit CommGrid(const ProcessGrid& grid);
  const ProcessGrid& grid() const { return grid_; }
  Group& group(std::string_view name);  // ProcessGrid::group_names(): "world", "dp", ..., "pp.embedding"

  // Makes `device`'s tensors travel by the transport `requested` resolves to on this job
  // (choose_gpu_transport) in every group of the grid, creating the device's communicators now,
  // in one order on every rank: collective over the world. Returns the choice, for the log.
  TransportChoice use_device(Device device, GpuTransport requested);
  // The pipeline's messages of `link` that this rank sends (activations to the next stage,
  // gradients to the previous one, around the pp ring) or receives: a group of two ranks, the
  // sender first (so the peer is group rank 1 when sending, 0 when receiving), on a communicator
  // of its own, counted as "pp", and on a device's own transport on a stream of its own. One
  // queue per direction and neighbour: a transport that runs a rank's operations in order (NCCL)
  // deadlocks when one queue holds a send that a neighbour needs behind a receive that needs the
  // neighbour (1F1B's activations and gradients, the interleaved schedule's wrap from the last
  // stage to the first); on its own edge each message waits only for its own peer, and both ends
  // issue an edge's messages in the schedule's order. Needs pp > 1.
  Group& pipeline_link(PipelineLink link, bool sending);
  // The choice use_device made (staged, "not chosen", before it runs).
  const TransportChoice& transport() const { return transport_; }

 private:
  ProcessGrid grid_;
  TransportChoice transport_{GpuTransport::staged, "not chosen: device tensors are staged through host memory"};
  std::map<std::string, int, std::less<>> colors_;  // each group's color in its kind's split
  void make_pipeline_edges(int pp_color);
  struct Edge {
    PipelineLink link;
    bool sending;
    std::shared_ptr<Group> group;
  };
  std::vector<Edge> edges_;  // this rank's pipeline edges, in the order every rank creates them
  std::map<std::string, std::shared_ptr<Group>, std::less<>> groups_;
};

}  // namespace wf::comm
