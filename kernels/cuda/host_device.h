#pragma once
// WF_HOST_DEVICE: a function both nvcc's device code and the host compiler build, so a bit-exact
// routine the CUDA kernels share with the CPU (the Philox stream, bf16 rounding) is tested on the
// host (tests/kernels/test_cuda_bit_exact.cpp), where it runs without a GPU. Free of fmt.
#ifdef __CUDACC__
#define WF_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define WF_HOST_DEVICE inline
#endif
