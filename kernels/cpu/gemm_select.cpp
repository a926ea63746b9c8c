// The process's default GEMM backend: WF_CPU_GEMM, or a short measurement at first use, kept
// per machine in a cache file so that every later run makes the same choice.
//
// Why measure instead of fixing one: which library is faster depends on the CPU and on how
// OpenBLAS was told to run on it. On a Zen 5 machine with OPENBLAS_CORETYPE=Haswell oneDNN ran
// the GPT shapes ~2x faster; on an Emerald Rapids machine whose model this OpenBLAS (0.3.21) does
// not know, OpenBLAS fell back to its Prescott (SSE3) kernels and oneDNN was ~7x faster; with
// the core type unset on Zen 5 the two were level (docs/kernels-gemm.md).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <fmt/format.h>
#include <mutex>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_onednn.h"
#include "src/core/atomic_file.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/threading.h"

namespace wf::kernels::cpu {
namespace {

// One product of the calibration: a transformer block's weight product and an attention tile
// (rows x columns x depth, B transposed as nn::Linear and the attention kernel store it).
struct CalibrationShape {
  std::int64_t M, N, K;
};
constexpr CalibrationShape kCalibrationShapes[] = {{256, 1024, 256}, {128, 256, 64}};
constexpr int kCalibrationRounds = 3;                    // backends alternate A B A B A B
constexpr double kSecondsPerMeasurement = 2.5e-3;        // per shape, backend and round
// OpenBLAS is chosen only when it is this much faster than oneDNN. The backends round
// differently, so a choice that flipped between two runs of one config (a near tie measured
// under load, as on AMD EPYC here: onednn 97, openblas 88 GFLOP/s) would make them differ in the
// last bits, and a resumed run would not continue its uninterrupted twin bit for bit. oneDNN was
// at least level on every machine measured (docs/kernels-gemm.md), so a tie goes to it.
constexpr double kOpenblasMargin = 1.25;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Seconds per call of one shape on one backend: calls repeated for kSecondsPerMeasurement.
double time_product(GemmBackend backend, const CalibrationShape& s, const std::vector<float>& a,
                    const std::vector<float>& b, std::vector<float>& c) {
  const auto call = [&] {
    gemm<float>(false, true, s.M, s.N, s.K, 1.0f, a.data(), s.K, b.data(), s.K, 0.0f, c.data(), s.N, backend);
  };
  call();  // first use: page faults, oneDNN's kernel generation
  int calls = 0;
  const auto start = std::chrono::steady_clock::now();
  do {
    call();
    ++calls;
  } while (seconds_since(start) < kSecondsPerMeasurement);
  return seconds_since(start) / calls;
}

// GFLOP/s of each backend over the calibration shapes, single-threaded: the best of the rounds
// per shape (the least disturbed), rounds alternating so a burst of load hits both sides.
std::vector<double> calibrate(const std::vector<GemmBackend>& backends) {
  const ScopedNumThreads one_thread(1);
  std::vector<std::vector<double>> best(backends.size(), std::vector<double>(std::size(kCalibrationShapes), 1e30));
  for (int round = 0; round < kCalibrationRounds; ++round) {
    for (std::size_t s = 0; s < std::size(kCalibrationShapes); ++s) {
      const auto& shape = kCalibrationShapes[s];
      // Fixed, well-scaled operands: the rate does not depend on the values.
      std::vector<float> a(static_cast<std::size_t>(shape.M * shape.K), 0.5f);
      std::vector<float> b(static_cast<std::size_t>(shape.N * shape.K), 0.25f);
      std::vector<float> c(static_cast<std::size_t>(shape.M * shape.N));
      for (std::size_t i = 0; i < backends.size(); ++i) {
        best[i][s] = std::min(best[i][s], time_product(backends[i], shape, a, b, c));
      }
    }
  }
  std::vector<double> gflops;
  for (const auto& seconds : best) {
    double flops = 0, total = 0;
    for (std::size_t s = 0; s < std::size(kCalibrationShapes); ++s) {
      const auto& shape = kCalibrationShapes[s];
      flops += 2.0 * double(shape.M) * double(shape.N) * double(shape.K);
      total += seconds[s];
    }
    gflops.push_back(flops / total * 1e-9);
  }
  return gflops;
}

// ---- the calibration's cache -------------------------------------------------------------
// A measurement made under load can tip either way where the backends are close, and two runs
// of one config must round alike (a resumed run continues its uninterrupted twin bit for bit),
// so the first measurement on a machine is kept: one file,
//   $WF_CACHE_DIR/gemm-backend.txt   (default $XDG_CACHE_HOME/wallfacer, else ~/.cache/wallfacer)
// holding the key it was measured under, the backend and the measurement. A file with another
// key (another CPU, OpenBLAS core type or oneDNN) is measured again and replaced; any file that
// cannot be read or written is ignored: the process measures as if there were none.

std::filesystem::path cache_file() {
  const std::filesystem::path dir = machine_cache_dir();
  return dir.empty() ? dir : dir / "gemm-backend.txt";
}

std::optional<GemmChoice> read_cached_choice(const std::filesystem::path& file, const std::string& key) {
  const auto lines = read_machine_cache(file, key, 2);  // the backend, the measurement
  if (!lines) return std::nullopt;
  const auto backend = parse_gemm_backend((*lines)[0]);
  if (!backend || !gemm_backend_available(*backend)) return std::nullopt;
  return GemmChoice{*backend, fmt::format("cached in {}: {}", file.string(), (*lines)[1])};
}

GemmChoice measure() {
  const std::vector<GemmBackend> backends{GemmBackend::onednn, GemmBackend::cblas};
  const std::vector<double> gflops = calibrate(backends);
  const std::size_t chosen = gflops[1] >= kOpenblasMargin * gflops[0] ? 1 : 0;
  return {backends[chosen], fmt::format("measured at first use: onednn {:.1f} GFLOP/s, openblas {:.1f} GFLOP/s "
                                        "(f32, 1 thread, {}x{}x{} and {}x{}x{}; openblas only from {:.2f}x)",
                                        gflops[0], gflops[1], kCalibrationShapes[0].M, kCalibrationShapes[0].N,
                                        kCalibrationShapes[0].K, kCalibrationShapes[1].M, kCalibrationShapes[1].N,
                                        kCalibrationShapes[1].K, kOpenblasMargin)};
}

GemmChoice decide() {
  if (const char* env = std::getenv("WF_CPU_GEMM"); env != nullptr && *env != '\0') {
    const auto backend = parse_gemm_backend(env);
    WF_CHECK(backend.has_value(), "WF_CPU_GEMM='{}' names no GEMM backend: use onednn, openblas or eigen (or unset it "
             "to let wallfacer measure)", env);
    WF_CHECK(gemm_backend_available(*backend), "WF_CPU_GEMM={}: {}; use WF_CPU_GEMM=openblas", env, onednn_info());
    return {*backend, fmt::format("WF_CPU_GEMM={}", env)};
  }
  if (!onednn_available()) return {GemmBackend::cblas, fmt::format("oneDNN: {}", onednn_info())};
  const std::filesystem::path file = cache_file();
  if (file.empty()) return measure();  // nowhere to keep it
  const std::string key = machine_cache_key();
  if (auto cached = read_cached_choice(file, key)) return *cached;
  GemmChoice measured = measure();
  write_machine_cache(file, key, {gemm_backend_name(measured.backend), measured.reason});
  return measured;
}

std::mutex& choice_mutex() {
  static std::mutex mutex;
  return mutex;
}
GemmChoice& stored_choice() {
  static GemmChoice choice;
  return choice;
}
std::atomic<int>& stored_backend() {  // -1 until decided: the lock-free fast path of default_gemm_backend
  static std::atomic<int> backend{-1};
  return backend;
}

}  // namespace

std::filesystem::path machine_cache_dir() {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv("WF_CACHE_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') return fs::path(x) / "wallfacer";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return fs::path(home) / ".cache" / "wallfacer";
  }
  return {};
}

// What a measurement depends on: the CPU (its model lines in /proc/cpuinfo), OpenBLAS's core
// type and the oneDNN build.
std::string machine_cache_key() {
  std::string cpu;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line) && !line.empty();) {
    if (line.rfind("vendor_id", 0) == 0 || line.rfind("cpu family", 0) == 0 || line.rfind("model", 0) == 0) {
      cpu += line.substr(line.find(':') + 1) + ";";
    }
  }
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  return fmt::format("cpu{} OPENBLAS_CORETYPE={}; {}", cpu, coretype != nullptr ? coretype : "", onednn_info());
}

std::optional<std::vector<std::string>> read_machine_cache(const std::filesystem::path& file, const std::string& key,
                                                           std::size_t count) {
  std::ifstream in(file);
  std::string cached_key;
  if (!std::getline(in, cached_key) || cached_key != key) return std::nullopt;
  std::vector<std::string> lines(count);
  for (std::string& line : lines) {
    if (!std::getline(in, line)) return std::nullopt;
  }
  return lines;
}

void write_machine_cache(const std::filesystem::path& file, const std::string& key,
                         const std::vector<std::string>& lines) {
  try {
    std::filesystem::create_directories(file.parent_path());
    std::string text = key + "\n";
    for (const std::string& line : lines) text += line + "\n";
    detail::write_file_atomically(file.string(), {{text.data(), text.size()}}, "machine measurement cache");
  } catch (const std::exception&) {
    // A read-only home or a full disk: the next process measures again.
  }
}

const char* gemm_backend_name(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::cblas: return "openblas";
    case GemmBackend::eigen: return "eigen";
    case GemmBackend::onednn: return "onednn";
  }
  return "unknown";
}

std::optional<GemmBackend> parse_gemm_backend(std::string_view name) {
  if (name == "openblas" || name == "cblas") return GemmBackend::cblas;
  if (name == "onednn") return GemmBackend::onednn;
  if (name == "eigen") return GemmBackend::eigen;
  return std::nullopt;
}

bool gemm_backend_available(GemmBackend backend) {
  return backend != GemmBackend::onednn || onednn_available();
}

GemmChoice gemm_choice() {
  std::lock_guard lock(choice_mutex());
  if (stored_backend().load() < 0) {
    // decide() runs under the lock; it cannot re-enter, as it calls gemm() with explicit
    // backends only, never asking for the default.
    stored_choice() = decide();
    stored_backend().store(static_cast<int>(stored_choice().backend));
  }
  return stored_choice();
}

void set_gemm_choice(GemmChoice choice) {
  WF_CHECK(gemm_backend_available(choice.backend), "set_gemm_choice({}): {}", gemm_backend_name(choice.backend),
           onednn_info());
  std::lock_guard lock(choice_mutex());
  stored_choice() = std::move(choice);
  stored_backend().store(static_cast<int>(stored_choice().backend));
}

GemmBackend default_gemm_backend() {
  const int backend = stored_backend().load(std::memory_order_acquire);
  return backend >= 0 ? static_cast<GemmBackend>(backend) : gemm_choice().backend;
}

}  // namespace wf::kernels::cpu
