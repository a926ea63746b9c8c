#pragma once
// The grid of a multi-tensor launch (adamw_update_multi, sum_of_squares_multi): one launch for a
// whole list of tensors, its blocks laid end to end, tensor t owning blocks [first, first + count)
// of the grid. The host uploads a table of entries (each with its MultiTensorBlocks) and every
// block finds its tensor in it, so the list's length is not bounded by a kernel's parameter space.
// tests/kernels/test_multi_tensor.cpp checks the map on the host. Free of fmt (nvcc reads it).
#include <cstdint>
#include <vector>

#include "src/core/host_device.h"

namespace wf::kernels::cuda {

// No default member initialisers: a kernel may keep an entry holding one in __shared__ memory.
struct MultiTensorBlocks {
  std::int64_t first;  // the tensor's first block in the grid
  std::int64_t count;  // its blocks (0 for a tensor the kernel has nothing to do for)
};

// Sets entries[t].blocks to blocks_of(entries[t]) blocks starting where tensor t − 1's end, and
// returns the grid's size (the sum of the counts).
template <class Entry, class BlocksOf>
std::int64_t lay_out_blocks(std::vector<Entry>& entries, BlocksOf blocks_of) {
  std::int64_t next = 0;
  for (Entry& entry : entries) {
    entry.blocks = MultiTensorBlocks{next, blocks_of(entry)};
    next += entry.blocks.count;
  }
  return next;
}

// The tensor that owns `block` (0 <= block < the grid's size) in a table laid out by
// lay_out_blocks: the last entry that starts at or before it. A tensor with no blocks starts where
// the next one does, so the search passes over it.
template <class Entry>
WF_HOST_DEVICE std::int64_t tensor_of_block(const Entry* table, std::int64_t tensors, std::int64_t block) {
  std::int64_t lo = 0, hi = tensors - 1;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo + 1) / 2;
    if (table[mid].blocks.first <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace wf::kernels::cuda
