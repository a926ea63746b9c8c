#pragma once
// The one place src/comm includes <mpi.h>: only the C API is used, so the deprecated C++
// bindings are skipped. Also the one helper every MPI return code goes through.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <string>
#include <string_view>

namespace wf::comm {

// MPI_Error_string of an error code.
std::string mpi_error_string(int code);

// Throws wf::Error "<what>: MPI error: <MPI's own text>" unless rc is MPI_SUCCESS. Every
// communicator is set to MPI_ERRORS_RETURN, so MPI failures arrive here instead of aborting.
void check_mpi(int rc, std::string_view what);

}  // namespace wf::comm
