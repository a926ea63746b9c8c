#include "src/comm/mpi_util.h"

#include "wallfacer/core/error.h"

namespace wf::comm {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("MPI error code {}", code);
  return std::string(text, static_cast<std::size_t>(length));
}

void check_mpi(int rc, std::string_view what) {
  if (rc != MPI_SUCCESS) [[unlikely]] {
    WF_FAIL("{}: MPI error: {}", what, mpi_error_string(rc));
  }
}

}  // namespace wf::comm
