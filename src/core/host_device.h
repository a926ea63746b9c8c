#pragma once
// WF_HOST_DEVICE: a function both nvcc's device code and the host compiler build, so a bit-exact
// routine the CUDA kernels share with the CPU (the Philox stream, bf16 rounding, the element
// conversions) is one piece of code, and is tested on the host where it runs without a GPU
// (tests/kernels/test_cuda_bit_exact.cpp, tests/core/cuda_convert_rules_test.cpp). Free of fmt.
#ifdef __CUDACC__
#define WF_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define WF_HOST_DEVICE inline
#endif
