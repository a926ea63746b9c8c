// check_on_rank0_for_all and run_with_shared_errors: rank_agreement.h.
#include "src/cli/rank_agreement.h"

#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "src/cli/commands.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/tensor.h"

namespace wf::cli {

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

}  // namespace wf::cli
