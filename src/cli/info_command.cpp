// `wallfacer info`: what this binary was built with and what it finds at run time. The facts
// are gathered once into a JSON object; the text form is a flat rendering of the same object,
// so the two outputs can never disagree.
#define OMPI_SKIP_MPICXX 1  // only the C API is used: skip the deprecated C++ bindings
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_onednn.h"
#include "kernels/cpu/simd_dispatch.h"
#include "src/cli/commands.h"
#include "wallfacer/comm/nccl.h"
#include "wallfacer/comm/transport.h"
#include "wallfacer/build_info.h"
#include "wallfacer/core/cuda_info.h"
#include "wallfacer/core/storage.h"
#include "wallfacer/core/threading.h"
#if WF_HAVE_CUDA
#include "kernels/cuda/attention_choice.h"
#include "kernels/cuda/inventory.h"
#endif

namespace wf::cli {
namespace {

using Json = nlohmann::ordered_json;

std::vector<std::string> split_commas(std::string_view text) {
  std::vector<std::string> parts;
  while (!text.empty()) {
    const auto comma = text.find(',');
    if (comma != 0) parts.emplace_back(text.substr(0, comma));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return parts;
}

// MPI_Get_library_version may be called before MPI_Init (MPI-3), so `info` never starts MPI.
std::string mpi_library_version() {
  char buffer[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(buffer, &length) != MPI_SUCCESS) return "unknown (MPI_Get_library_version failed)";
  std::string version(buffer, static_cast<std::size_t>(std::max(length, 0)));
  while (!version.empty() && (version.back() == '\n' || version.back() == ' ' || version.back() == '\0')) {
    version.pop_back();
  }
  return version;
}

// The CUDA backend compiled in (kernels/cuda, src/core/cuda): what computes, the libraries and
// their versions, the devices and the allocator's memory on them. Nothing here starts a CUDA
// context unless a device is visible.
Json cuda_facts() {
  Json cuda;
  if (!WF_HAVE_CUDA) {
    cuda["toolkit"] = Json();
    cuda["use"] = "none: built without a CUDA toolkit";
    return cuda;
  }
  cuda["toolkit"] = WF_CUDA_TOOLKIT_VERSION;
  cuda["use"] = "compute (train.device: cuda or auto); communication: see comm.device_transports";
  const std::string runtime = cuda_runtime_version(), driver = cuda_driver_version();
  cuda["runtime"] = runtime.empty() ? Json() : Json(runtime);
  cuda["driver"] = driver.empty() ? Json() : Json(driver);
#if WF_HAVE_CUDA
  cuda["kernels"] = kernels::cuda::cuda_kernel_inventory();
  // cuDNN's fused attention and the per-shape choice against the own kernel (attention_choice.h): the
  // choices this process made so far (a training run logs each one as it is made).
  cuda["cudnn"] = kernels::cuda::cudnn_attention_info();
  cuda["attention_choice"] = "bf16: the own kernel, cuDNN or (Hopper) the sm_90 kernels per shape and direction, "
                             "measured and compared at first use (WF_ATTENTION_BACKEND=auto|own|cudnn|sm90; the "
                             "sm_90 kernels only with WF_ATTENTION_SM90=1 until they have run on a GPU)";
  cuda["attention_choices"] = kernels::cuda::attention_choice_lines();
  cuda["graphs"] = "a micro batch's forward and backward captured once and replayed (train.cuda_graph: true; one "
                   "process, unpacked batches; docs/devices.md, Graphs)";
#endif
  std::string error;
  cuda["devices"] = cuda_devices(&error);
  if (cuda["devices"].empty()) {
    cuda["error"] = "no CUDA devices found (" + error + ")";
  } else {
    // This process's allocations so far (none yet in `info` itself: the fields metrics.jsonl
    // reports per step, allocated = in tensors, reserved = that plus the pool's cache).
    const MemoryStats memory = memory_stats(Device::cuda());
    cuda["memory"]["allocated_bytes"] = memory.live_bytes;
    cuda["memory"]["reserved_bytes"] = memory.live_bytes + memory.cached_bytes;
    cuda["memory"]["peak_bytes"] = memory.peak_bytes;
  }
  return cuda;
}

// How tensors travel between ranks (comm/transport.h): MPI for the CPU's; a GPU's by NCCL on its
// communication stream where the build has NCCL and every rank has a GPU of its own, else staged
// through pinned host memory over MPI. A world of one on this machine picks as `auto` says here.
Json comm_facts() {
  Json comm;
  comm["cpu"] = "mpi";
  comm["device_transports"] = comm::nccl_available() ? std::vector<std::string>{"nccl", "staged"}
                                                     : std::vector<std::string>{"staged"};
  comm["auto"] = "nccl where the build has it and every rank of the job has a GPU of its own, else staged "
                 "(comm.gpu_transport overrides)";
  if (WF_HAVE_CUDA && !cuda_devices().empty()) {
    comm["auto_here"] =
        comm::choose_gpu_transport(comm::GpuTransport::automatic, Device::cuda(0), comm::nccl_available(), {{"", 0}})
            .reason;
  }
  return comm;
}

Json collect_info() {
  Json info;
  info["version"] = WF_VERSION;
  info["build_type"] = WF_BUILD_TYPE;
  info["compiler"] = WF_CXX_COMPILER;
  info["sanitizers"] = split_commas(WF_SANITIZERS);
  // The compute backends built (the test device is every build's, for tests: docs/devices.md).
  info["backends"] = WF_HAVE_CUDA ? std::vector<std::string>{"cpu", "cuda"} : std::vector<std::string>{"cpu"};
  info["blas"] = blas_info();
  info["onednn"] = kernels::cpu::onednn_info();
  // The GEMM backend products run and why (WF_CPU_GEMM, or a ~50 ms measurement made now).
  const kernels::cpu::GemmChoice gemm = kernels::cpu::gemm_choice();
  info["gemm"]["backend"] = kernels::cpu::gemm_backend_name(gemm.backend);
  info["gemm"]["reason"] = gemm.reason;
  info["gemm"]["bf16"] = kernels::cpu::gemm_bf16_path();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  info["openblas_coretype"] = coretype ? Json(coretype) : Json();
  info["openmp_threads"] = num_threads();
  const int lanes = kernels::cpu::simd::lanes();
  info["cpu_simd"] = lanes == 16 ? "avx512 (16 f32 lanes)" : lanes == 8 ? "avx2 (8 f32 lanes)" : "128-bit (4 f32 lanes)";
  info["host_memory_cache_limit_bytes"] = memory_cache_limit();
  info["mpi_library"] = mpi_library_version();
  info["cuda"] = cuda_facts();
  info["comm"] = comm_facts();
  return info;
}

std::string scalar_text(const Json& value) {
  if (value.is_null()) return "(none)";
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

// One "key: value" line per leaf; nested objects become dotted keys ("cuda.devices") and
// arrays a comma-separated list, or one element per line when they are long (device lists).
void flatten(const Json& object, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& lines) {
  for (const auto& [key, value] : object.items()) {
    const std::string name = prefix + key;
    if (value.is_object()) {
      flatten(value, name + ".", lines);
    } else if (value.is_array()) {
      std::string joined;
      for (const auto& element : value) joined += (joined.empty() ? "" : ", ") + scalar_text(element);
      if (value.empty()) {
        lines.emplace_back(name, "none");
      } else if (joined.size() <= 60) {
        lines.emplace_back(name, joined);
      } else {
        for (const auto& element : value) lines.emplace_back(name, scalar_text(element));
      }
    } else {
      lines.emplace_back(name, scalar_text(value));
    }
  }
}

void print_text(const Json& info) {
  std::vector<std::pair<std::string, std::string>> lines;
  flatten(info, "", lines);
  std::size_t width = 0;
  for (const auto& line : lines) width = std::max(width, line.first.size());
  for (const auto& [key, value] : lines) {
    std::printf("%-*s  %s\n", static_cast<int>(width + 1), (key + ":").c_str(), value.c_str());
  }
}

}  // namespace

void add_info_command(CLI::App& app) {
  CLI::App* command =
      app.add_subcommand("info", "Show the build, the compute backends and the libraries (BLAS, MPI, CUDA) in use");
  auto as_json = std::make_shared<bool>(false);
  command->add_flag("--json", *as_json, "Print the same facts as one JSON object");
  set_action(*command, [as_json] {
    const Json info = collect_info();
    if (*as_json) {
      std::printf("%s\n", info.dump(2).c_str());
    } else {
      print_text(info);
    }
    return kExitOk;
  });
}

}  // namespace wf::cli
