#include "wallfacer/core/threading.h"

#include <omp.h>

#include <mutex>
#include <string>

#include "wallfacer/core/error.h"

extern "C" {
void openblas_set_num_threads(int num_threads);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

namespace wf {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  WF_CHECK(n >= 1, "set_num_threads({}): need at least one thread", n);
  omp_set_num_threads(n);
}

ScopedNumThreads::ScopedNumThreads(int n) : saved_(omp_get_max_threads()) {
  if (n != saved_) set_num_threads(n);
}
ScopedNumThreads::~ScopedNumThreads() {
  if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
}

void init_blas_threads() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

const char* blas_info() {
  static const std::string info =
      std::string(openblas_get_config()) + " (core: " + std::string(openblas_get_corename()) + ")";
  return info.c_str();
}

}  // namespace wf
