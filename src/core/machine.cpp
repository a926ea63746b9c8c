#include "wallfacer/core/machine.h"

#include <unistd.h>

#include <fstream>

namespace wf {
namespace {

// A positive whole number from a file such as a cgroup's memory.max ("max" and errors: 0).
std::size_t number_in_file(const char* path) {
  std::ifstream in(path);
  unsigned long long value = 0;
  return (in >> value) ? static_cast<std::size_t>(value) : 0;
}

}  // namespace

std::size_t machine_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  std::size_t total = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                                            : std::size_t{2} << 30;
  for (const char* limit_file : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    const std::size_t limit = number_in_file(limit_file);
    if (limit > 0 && limit < total) total = limit;
  }
  return total;
}

}  // namespace wf
