#pragma once
// What the trainer and the benchmarks ask of the machine's GEMM, without naming a backend: its
// rate (the peak the MFU is measured against) and a description, plus the machine cache those
// measurements are kept in. Today only the CPU answers (kernels/cpu/gemm.h); a device backend
// adds its own answer here with its GEMM.
#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/cpu/gemm.h"

namespace wf::kernels {

// GFLOP/s of one f32 GEMM [m, k]·[k, n] on one thread, the median of `iters` runs; `gemm` names one
// of the CPU's GEMM implementations ("default", "openblas", "onednn", "eigen"). Seeded inputs: it
// never moves the default generator.
double sgemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k, int iters, std::string_view gemm = "default");
// The GEMM the CPU runs and why ("onednn (measured at first use: ...)").
std::string default_gemm_description();
// The name of the GEMM the CPU runs ("onednn").
std::string default_gemm_name();

// The machine cache (kernels/cpu/gemm.h): where measurements of this machine are kept, under
// which key, and the atomic file format they share. Device-independent utilities.
using cpu::machine_cache_dir;
using cpu::machine_cache_key;
using cpu::read_machine_cache;
using cpu::write_machine_cache;

}  // namespace wf::kernels
