#include "wallfacer/comm/runtime.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#include "kernels/backend.h"
#include "src/comm/mpi_backend.h"
#include "src/core/address_sanitizer.h"
#include "src/comm/watchdog.h"
#include "wallfacer/core/cuda_info.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"
#include "wallfacer/core/threading.h"

namespace wf::comm {
namespace {

// Leaked on purpose: groups handed out by the runtime may outlive main's locals, and MPI is
// finalised from an atexit handler, after which freeing communicators is not allowed anyway.
Runtime* g_runtime = nullptr;

std::mutex& init_mutex() {
  static std::mutex mutex;
  return mutex;
}

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

int environment_flag(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  const std::string_view text(value);
  if (text == "1" || text == "on" || text == "true") return 1;
  if (text == "0" || text == "off" || text == "false") return 0;
  log::warn("ignoring {}='{}': expected 1 or 0", name, text);
  return fallback;
}

std::atomic<int>& argument_checks_state() {
#ifdef NDEBUG
  constexpr int kDefault = 0;
#else
  constexpr int kDefault = 1;
#endif
  static std::atomic<int> state{environment_flag("WF_COMM_CHECK", kDefault)};
  return state;
}

// Every rank makes the per-process choices rank 0's CPU backend made (kernels/backend.h
// replicated_choice: the CPU GEMM library): replicas of one computation (the tp ranks, a WallFacer
// team) must round alike, and a measurement made on each rank could come out differently. A
// failure on rank 0 (a bad WF_CPU_GEMM) fails every rank with its message. A world of one decides
// lazily, at its first product.
void agree_on_gemm_backend(int rank, int world_size) {
  if (world_size == 1) return;
  kernels::Backend& cpu = kernels::backend_for(Device::cpu());
  int backend = -1;
  char reason[512] = {};
  if (rank == 0) {
    try {
      std::string why;
      backend = cpu.replicated_choice(why);
      std::snprintf(reason, sizeof reason, "%s", why.c_str());
    } catch (const std::exception& e) {
      std::snprintf(reason, sizeof reason, "%s", e.what());
    }
  }
  check_mpi(MPI_Bcast(&backend, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast(GEMM backend)");
  check_mpi(MPI_Bcast(reason, sizeof reason, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast(GEMM backend reason)");
  reason[sizeof reason - 1] = '\0';
  WF_CHECK(backend >= 0, "{}", reason);
  if (rank != 0) cpu.adopt_replicated_choice(backend, std::string("rank 0's: ") + reason);
}

}  // namespace

Runtime& Runtime::init(int* argc, char*** argv) {
  std::lock_guard lock(init_mutex());
  if (g_runtime != nullptr) return *g_runtime;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  WF_CHECK(!finalized, "Runtime::init: MPI was already finalised in this process, and MPI cannot be restarted");

  std::unique_ptr<Runtime> runtime(new Runtime());
  if (!initialized) {
    // Every Group collective is non-blocking (the watchdog polls it). Open MPI's default
    // MPI_Iallreduce algorithm is markedly slower than its blocking all-reduce for large
    // messages; the ring algorithm matches it at >= 1 MiB (docs/communication.md, bench comm).
    // Only a default: a value the user set in the environment wins.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
    int provided = MPI_THREAD_SINGLE;
    {
      const detail::IgnoreLeaksHere open_mpi_keeps_these;  // until exit, by design
      check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    }
    runtime->owns_mpi_ = true;
    if (provided < MPI_THREAD_MULTIPLE) {
      log::warn("the MPI library provides thread level {} instead of MPI_THREAD_MULTIPLE: keep communication on one "
                "thread at a time",
                provided);
    }
  }
  check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler(MPI_COMM_WORLD)");
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &runtime->rank_), "MPI_Comm_rank(MPI_COMM_WORLD)");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &runtime->world_size_), "MPI_Comm_size(MPI_COMM_WORLD)");
  log::set_rank(runtime->rank_, runtime->world_size_);

  // The ranks sharing this node's memory decide the device and the share of the cores.
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, runtime->rank_, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  check_mpi(MPI_Comm_rank(node, &runtime->local_rank_), "MPI_Comm_rank(node)");
  check_mpi(MPI_Comm_size(node, &runtime->local_size_), "MPI_Comm_size(node)");
  check_mpi(MPI_Comm_free(&node), "MPI_Comm_free(node)");

  // cuda:local_rank; with more ranks than GPUs on a node, ranks share them round robin.
  const std::vector<std::string> gpus = cuda_devices();
  runtime->device_ =
      gpus.empty() ? Device::cpu() : Device::cuda(runtime->local_rank_ % static_cast<int>(gpus.size()));

  const char* omp_threads = std::getenv("OMP_NUM_THREADS");
  if (omp_threads != nullptr && *omp_threads != '\0') {
    runtime->threads_ = num_threads();
  } else {
    const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    runtime->threads_ = std::max(1, cores / runtime->local_size_);
    set_num_threads(runtime->threads_);
  }

  MPI_Comm world_copy = MPI_COMM_NULL;  // the world group's own communicator: no clash with user MPI calls
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &world_copy), "MPI_Comm_dup(MPI_COMM_WORLD)");
  std::vector<int> everyone(static_cast<std::size_t>(runtime->world_size_));
  std::iota(everyone.begin(), everyone.end(), 0);
  runtime->world_ = std::make_shared<Group>("world", std::move(everyone), runtime->rank_,
                                            std::make_shared<MpiBackend>(world_copy, "world"));

  g_runtime = runtime.release();
  std::atexit([] { g_runtime->finalize(); });
  // Last: it may throw (the same error on every rank), and MPI is then finalised at exit.
  agree_on_gemm_backend(g_runtime->rank_, g_runtime->world_size_);
  log::debug("runtime: rank {} of {}, local rank {} of {}, device {}, {} threads", g_runtime->rank_,
             g_runtime->world_size_, g_runtime->local_rank_, g_runtime->local_size_, g_runtime->device_.str(),
             g_runtime->threads_);
  return *g_runtime;
}

bool Runtime::initialized() { return g_runtime != nullptr; }

Runtime& Runtime::get() {
  WF_CHECK(g_runtime != nullptr,
           "the distributed runtime is not initialised: call wf::comm::Runtime::init(&argc, &argv) first (or start "
           "the program through wf::comm::run_main)");
  return *g_runtime;
}

Group& Runtime::world() {
  WF_CHECK(world_ != nullptr, "Runtime::world(): the runtime has been finalised");
  return *world_;
}

std::shared_ptr<Group> Runtime::split(std::string name, int color, int key) {
  WF_CHECK(!finalized_, "Runtime::split('{}'): the runtime has been finalised", name);
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, color < 0 ? MPI_UNDEFINED : color, key, &comm),
            fmt::format("MPI_Comm_split for group '{}'", name));
  if (comm == MPI_COMM_NULL) return nullptr;
  auto backend = std::make_shared<MpiBackend>(comm, name);
  // The members' world ranks in group order, which MPI knows and Group wants spelled out.
  Tensor mine = Tensor::from_vector(std::vector<std::int32_t>{rank_}, {1});
  Tensor members = Tensor::empty({backend->size()}, DType::i32);
  {
    const CallLabel label("split (member list)");
    backend->all_gather(mine, members);
  }
  const std::vector<std::int32_t> ranks = members.to_vector<std::int32_t>();
  return std::make_shared<Group>(std::move(name), std::vector<int>(ranks.begin(), ranks.end()), backend->rank(),
                                 std::move(backend));
}

void Runtime::abort(std::string_view message, int exit_code) {
  std::fflush(stdout);
  const std::string line = world_size_ > 1 ? fmt::format("wallfacer: error: [rank {}/{}] {}\n", rank_, world_size_, message)
                                           : fmt::format("wallfacer: error: {}\n", message);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  if (mpi_running()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

void Runtime::finalize() {
  if (finalized_) return;
  finalized_ = true;
  world_.reset();
  if (owns_mpi_ && mpi_running()) {
    const detail::IgnoreLeaksHere open_mpi_keeps_these;
    MPI_Finalize();
  }
}

int run_main(int argc, char** argv, const std::function<int()>& body) {
  Runtime* started = nullptr;
  try {
    started = &Runtime::init(&argc, &argv);
  } catch (const std::exception& e) {
    // What init refuses, it refuses on every rank alike: each says so and ends.
    std::fprintf(stderr, "wallfacer: error: %s\n", e.what());
    return 1;
  }
  Runtime& runtime = *started;
  int status = 1;
  try {
    status = body();
  } catch (const std::exception& e) {
    // Another rank may be waiting for this one inside a collective: end them all, now.
    if (runtime.world_size() > 1) runtime.abort(e.what());
    std::fprintf(stderr, "wallfacer: error: %s\n", e.what());
    status = 1;
  }
  runtime.finalize();
  return status;
}

bool argument_checks_enabled() { return argument_checks_state().load(std::memory_order_relaxed) != 0; }
void set_argument_checks(bool enabled) { argument_checks_state() = enabled ? 1 : 0; }

}  // namespace wf::comm
