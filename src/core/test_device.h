#pragma once
// The test device, Device::test() ("testdev"): a second backend whose memory is host memory from
// an arena of its own that is kept inaccessible (mprotect PROT_NONE) except while one of its own
// copies or kernels runs. A run on it proves that nothing falls back to the host: any kernels::cpu
// call on its tensors, any loop over data<T>() of one, faults at once (SIGSEGV) at the line that
// touched it. Its streams run inline, or as worker-thread queues with random delays
// (src/core/test_device_streams.h). docs/devices.md describes it.
//
// The arena reserves WF_TESTDEV_MB MiB of address space (default 4096) on first use; blocks are
// whole pages, and every new block is filled with 0xFF bytes (NaN floats, -1 integers), so a
// kernel that reads memory it never wrote fails its test as well.
namespace wf::detail {

// While one exists, on any thread, the test device's memory is readable and writable. Its own
// copies and kernels run inside one; so may a test that inspects its memory on purpose. (A host
// read by another thread while one exists goes unnoticed: the protection is the whole arena's.)
class TestDeviceAccess {
 public:
  TestDeviceAccess();
  ~TestDeviceAccess();
  TestDeviceAccess(const TestDeviceAccess&) = delete;
  TestDeviceAccess& operator=(const TestDeviceAccess&) = delete;
};

// True when p points into the test device's arena.
bool is_test_device_memory(const void* p);

}  // namespace wf::detail
