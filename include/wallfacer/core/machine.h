#pragma once
// Facts about the machine this process runs on.
#include <cstddef>

namespace wf {

// The memory this process may use in bytes: the machine's physical memory, or its cgroup's
// limit when lower (containers, Slurm). 2 GiB when the system does not say.
std::size_t machine_memory_bytes();

}  // namespace wf
