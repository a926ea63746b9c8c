// check_on_rank0_for_all, run_with_shared_errors and run_main_reporting_once: rank_agreement.h.
#include "src/cli/rank_agreement.h"

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/cli/commands.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/tensor.h"

namespace wf::cli {
namespace {

using Clock = std::chrono::steady_clock;

// How long a failing rank waits for the others to fail too before it ends the job alone. Ranks
// that fail on the same input fail within milliseconds of each other; a rank that fails alone
// leaves the others in a collective, and they should not wait long for the job to end.
std::chrono::milliseconds agreement_window() {
  return std::min<std::chrono::milliseconds>(std::chrono::seconds(5), comm::watchdog_timeout());
}

// Polls `request` until it completes (true) or `deadline` passes (false; the request is left
// pending: the job is about to be aborted).
bool wait_until(MPI_Request& request, Clock::time_point deadline) {
  for (;;) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done != 0) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Every rank's failure message, exchanged over `comm` (a communicator only failures use), or
// nothing when some rank does not join before the window closes.
std::optional<std::vector<std::string>> exchange_failures(MPI_Comm comm, const std::string& mine) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  const Clock::time_point deadline = Clock::now() + agreement_window();
  const int length = static_cast<int>(std::min<std::size_t>(mine.size(), 1 << 20));
  std::vector<int> lengths(static_cast<std::size_t>(size));
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm, &request);
  if (!wait_until(request, deadline)) return std::nullopt;
  std::vector<int> offsets(lengths.size(), 0);
  for (std::size_t r = 1; r < lengths.size(); ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
  std::string all(static_cast<std::size_t>(offsets.back() + lengths.back()), '\0');
  MPI_Iallgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, comm,
                  &request);
  if (!wait_until(request, deadline + agreement_window())) return std::nullopt;
  std::vector<std::string> by_rank;
  for (std::size_t r = 0; r < lengths.size(); ++r) by_rank.push_back(all.substr(offsets[r], lengths[r]));
  return by_rank;
}

std::string message_of(const std::exception& e) {
  return dynamic_cast<const Error*>(&e) != nullptr ? e.what() : std::string("unexpected failure: ") + e.what();
}

// MPI_Finalize waits for the other ranks; should a failure have left a transfer unmatched, the
// process still ends, with its status, a little later.
void finalize_within_bounds(comm::Runtime& runtime, int status) {
  std::thread([status] {
    std::this_thread::sleep_for(std::chrono::seconds(30));
    std::fflush(nullptr);
    std::_Exit(status);
  }).detach();
  runtime.finalize();
}

}  // namespace

void check_on_rank0_for_all(comm::Group& world, const std::function<void()>& check) {
  enum : std::int64_t { kPassed, kUserError, kError };
  std::string message;
  std::int64_t verdict = kPassed;
  if (world.rank() == 0) {
    try {
      check();
    } catch (const UserError& e) {
      message = e.what();
      verdict = kUserError;
    } catch (const std::exception& e) {
      message = e.what();
      verdict = kError;
    }
  }
  if (world.size() > 1) {
    const auto length = static_cast<std::int64_t>(message.size());
    Tensor header = Tensor::from_vector(std::vector<std::int64_t>{length, verdict}, {2});
    world.broadcast(header, 0);
    const std::vector<std::int64_t> got = header.to_vector<std::int64_t>();
    if (got[0] > 0) {
      Tensor text = Tensor::empty({got[0]}, DType::u8);
      if (world.rank() == 0) std::memcpy(text.data<std::uint8_t>(), message.data(), message.size());
      world.broadcast(text, 0);
      message.assign(reinterpret_cast<const char*>(text.data<std::uint8_t>()), static_cast<std::size_t>(got[0]));
    }
    verdict = got[1];
  }
  if (verdict == kPassed) return;
  if (verdict == kUserError) throw UserError(message);
  throw Error(message);
}

int run_with_shared_errors(comm::Group& world, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UserError& e) {
    if (world.rank() == 0) print_error(e.what());
    return kExitRuntimeError;
  }
}

int run_main_reporting_once(const std::function<int()>& body) {
  comm::Runtime* started = nullptr;
  try {
    started = &comm::Runtime::init();
  } catch (const std::exception& e) {
    print_error(message_of(e));  // what init refuses, it refuses on every rank alike
    return kExitRuntimeError;
  }
  comm::Runtime& runtime = *started;
  MPI_Comm failures = MPI_COMM_NULL;  // its own communicator: no clash with a collective in flight
  if (runtime.world_size() > 1) MPI_Comm_dup(MPI_COMM_WORLD, &failures);
  int status = kExitRuntimeError;
  try {
    status = body();
  } catch (const std::exception& e) {
    const std::string message = message_of(e);
    if (runtime.world_size() == 1) {
      print_error(message);
    } else {
      const auto by_rank = exchange_failures(failures, message);
      if (!by_rank) runtime.abort(message);  // the others wait elsewhere: end them all, now
      if (runtime.rank() == 0) {
        for (const std::string& line : failure_report(*by_rank)) print_error(line);
      }
    }
    status = kExitRuntimeError;
  }
  finalize_within_bounds(runtime, status);
  return status;
}

}  // namespace wf::cli
