// The CUDA backend's matrix products (kernels/backend.h: gemm, gemm_batched, gemm_bf16,
// linear_forward, linear_gelu_forward, linear_add_forward) through cuBLASLt, with the semantics of kernels/cpu/gemm.h.
//
// Row-major through a column-major library. A row-major matrix X [r, c] with leading dimension
// ld is, byte for byte, the column-major matrix Xᵀ [c, r] with the same ld. So the row-major
// C[M, N] = op(A)·op(B) is computed as the column-major Cᵀ[N, M] = op(B)ᵀ·op(A)ᵀ:
//   - cuBLASLt's first operand ("A") is our B. Stored, it is column-major [N, K] when trans_b
//     is false (the row-major [K, N]; op N gives op(B)ᵀ) and [K, N] when trans_b (the row-major
//     [N, K]; op T gives op(B)ᵀ = B as stored). Its ld is ldb.
//   - its second operand ("B") is our A: column-major [K, M] when trans_a is false (op N) and
//     [M, K] when trans_a (op T), with ld = lda.
//   - its m, n, k are N, M, K; C and D are one column-major [N, M] layout with ld = ldc.
// A bias per output feature (the N columns of row-major C) is then a bias per row of the
// column-major D: exactly what CUBLASLT_EPILOGUE_BIAS adds. The GELU epilogue's aux matrix (the
// pre-activation) has D's layout, [N, M] column-major with ld = ldc. linear_add_forward's residual
// is C (beta 1) read from its own buffer, with D's layout and type, D the output.
//
// Per shape (dtype, TF32, trans flags, M, N, K, leading dimensions, batch and strides, pointer
// alignments, epilogue) the descriptors and the heuristic's algorithm are made once and kept for
// the process; the handle is one per device, the workspace one per stream (see workspace_for).
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_kernels.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/dispatch.h"
#include "src/core/cuda/cuda_check.h"
#include "wallfacer/core/device_backend.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"

namespace wf::kernels::cuda {
namespace {

// What cuBLAS itself keeps per stream on Hopper; the heuristic picks among algorithms within it.
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

// ---- the products' element types -------------------------------------------------------------

// f32 and f64: operands, result and scalars of that type; bf16: bf16 operands, f32 result and
// scalars, f32 accumulation.
enum class Kind { f32, f64, bf16 };

struct Types {
  cudaDataType_t operands, result, scale;
  cublasComputeType_t compute;
  std::size_t operand_size, result_size;
  const char* name;
};

Types types_of(Kind kind, bool tf32) {
  switch (kind) {
    case Kind::f64: return {CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F, 8, 8, "f64"};
    case Kind::bf16: return {CUDA_R_16BF, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 2, 4, "bf16"};
    case Kind::f32: break;
  }
  return {CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, 4, 4,
          tf32 ? "f32 (TF32)" : "f32"};
}

Kind floating_kind(DType dtype, const char* who) {
  Kind kind = Kind::f32;
  dispatch_floating(dtype, who, [&](auto tag) { kind = sizeof(tag) == 8 ? Kind::f64 : Kind::f32; });
  return kind;
}

// ---- one product, as the entries describe it ---------------------------------------------------

// `batch` products C_i = alpha·op(A_i)·op(B_i) + beta·C_i (+ bias per column), X_i = X + i·stride_x.
struct Product {
  Kind kind;
  bool ta, tb;
  std::int64_t batch, M, N, K;
  double alpha;
  const void* A;
  std::int64_t lda, stride_a;
  const void* B;
  std::int64_t ldb, stride_b;
  double beta;
  void* C;
  std::int64_t ldc, stride_c;
  const void* bias;  // null: no bias epilogue
  void* aux;         // non-null: the GELU epilogue, its input (the pre-activation) written here in D's layout
  const void* source;  // non-null: the C that beta scales, read from here (C's layout) instead of from C itself
};

// kernels/cpu/gemm.h's checks, so that a bad call fails alike on either device.
void check_product(const char* who, const Product& p) {
  WF_CHECK(p.batch >= 0 && p.M >= 0 && p.N >= 0 && p.K >= 0,
           "{}: sizes must be non-negative, got batch={} M={} N={} K={}", who, p.batch, p.M, p.N, p.K);
  const std::int64_t a_cols = p.ta ? p.M : p.K, b_cols = p.tb ? p.K : p.N;
  WF_CHECK(p.lda >= a_cols,
           "{}: lda={} is smaller than the {} columns of A as stored (trans_a={}, M={}, K={}); pass lda >= {}", who,
           p.lda, a_cols, p.ta, p.M, p.K, a_cols);
  WF_CHECK(p.ldb >= b_cols,
           "{}: ldb={} is smaller than the {} columns of B as stored (trans_b={}, K={}, N={}); pass ldb >= {}", who,
           p.ldb, b_cols, p.tb, p.K, p.N, b_cols);
  WF_CHECK(p.ldc >= p.N, "{}: ldc={} is smaller than the N={} columns of C; pass ldc >= {}", who, p.ldc, p.N, p.N);
  WF_CHECK(p.stride_a >= 0 && p.stride_b >= 0 && p.stride_c >= 0,
           "{}: strides must be non-negative (0 broadcasts), got stride_a={} stride_b={} stride_c={}", who, p.stride_a,
           p.stride_b, p.stride_c);
  if (p.batch == 0 || p.M == 0 || p.N == 0) return;
  WF_CHECK(p.K == 0 || (p.A != nullptr && p.B != nullptr),
           "{}: A or B is null for a non-empty product (M={} N={} K={})", who, p.M, p.N, p.K);
  WF_CHECK(p.C != nullptr, "{}: C is null for a non-empty [{}, {}] result", who, p.M, p.N);
  const std::int64_t c_span = (p.M - 1) * p.ldc + p.N;
  WF_CHECK(p.batch == 1 || p.stride_c >= c_span,
           "{}: stride_c={} makes the {} C matrices overlap (each spans {} elements for M={}, N={}, ldc={}); pass "
           "stride_c >= {}",
           who, p.stride_c, p.batch, c_span, p.M, p.N, p.ldc, c_span);
  WF_CHECK(p.batch <= std::numeric_limits<std::int32_t>::max(),
           "{}: batch={} exceeds cuBLASLt's 32-bit batch count; split the batch", who, p.batch);
}

// ---- the plan of one shape: descriptors and the heuristic's algorithm -------------------------

struct PlanKey {
  int device;
  Kind kind;
  bool tf32, ta, tb, bias, gelu;
  std::int64_t M, N, K, lda, ldb, ldc, batch, stride_a, stride_b, stride_c;
  // Alignment in bytes (a power of two, at most 256) of each operand's first element and of
  // every batch item's: algorithms that need more are excluded.
  std::uint32_t align_a, align_b, align_c, align_bias, align_aux, align_source;
  friend auto operator<=>(const PlanKey&, const PlanKey&) = default;
};

std::uint32_t alignment(const void* p, std::int64_t batch, std::int64_t stride, std::size_t elem_size) {
  std::uint64_t bits = reinterpret_cast<std::uintptr_t>(p) | 256u;
  if (batch > 1) bits |= static_cast<std::uint64_t>(stride) * elem_size;
  return static_cast<std::uint32_t>(bits & (~bits + 1));  // the lowest set bit
}

PlanKey key_of(Device device, const Product& p) {
  const Types t = types_of(p.kind, false);
  return {device.index,
          p.kind,
          p.kind == Kind::f32 && cuda_tf32(),
          p.ta,
          p.tb,
          p.bias != nullptr,
          p.aux != nullptr,
          p.M,
          p.N,
          p.K,
          p.lda,
          p.ldb,
          p.ldc,
          p.batch,
          p.batch > 1 ? p.stride_a : 0,
          p.batch > 1 ? p.stride_b : 0,
          p.batch > 1 ? p.stride_c : 0,
          alignment(p.A, p.batch, p.stride_a, t.operand_size),
          alignment(p.B, p.batch, p.stride_b, t.operand_size),
          alignment(p.C, p.batch, p.stride_c, t.result_size),
          p.bias != nullptr ? alignment(p.bias, 1, 0, t.result_size) : 0u,
          p.aux != nullptr ? alignment(p.aux, 1, 0, t.result_size) : 0u,
          p.source != nullptr ? alignment(p.source, p.batch, p.stride_c, t.result_size) : 0u};
}

std::string describe(const PlanKey& k) {
  return fmt::format("{} product M={} N={} K={} (trans_a={}, trans_b={}, lda={}, ldb={}, ldc={}, batch={}, strides "
                     "{}/{}/{}{}{}{})",
                     types_of(k.kind, k.tf32).name, k.M, k.N, k.K, k.ta, k.tb, k.lda, k.ldb, k.ldc, k.batch,
                     k.stride_a, k.stride_b, k.stride_c, k.bias ? ", bias epilogue" : "",
                     k.gelu ? ", GELU epilogue" : "", k.align_source != 0 ? ", C read from its own buffer" : "");
}

// `key` (nullable) names the shape; the message is built only on failure.
void check_status(cublasStatus_t status, const char* call, const PlanKey* key, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const std::string what = key == nullptr ? std::string(call) : fmt::format("{} for the {}", call, describe(*key));
  detail::throw_library_error("cuBLASLt", static_cast<int>(status), cublasLtGetStatusName(status), what.c_str(), file,
                              line);
}
// WF_CUBLASLT_CHECK(cublasLt...(...), &key): wf::Error naming the call, the shape and the status.
#define WF_CUBLASLT_CHECK(call, key) check_status((call), #call, (key), __FILE__, __LINE__)

template <class V>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const V& value,
                   const PlanKey& key) {
  WF_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)), &key);
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                   std::int64_t batch, std::int64_t stride, const PlanKey& key) {
  cublasLtMatrixLayout_t layout = nullptr;
  WF_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<std::uint64_t>(rows),
                                               static_cast<std::uint64_t>(cols), ld),
                    &key);
  if (batch > 1) {
    const auto count = static_cast<std::int32_t>(batch);
    const auto set = [&](cublasLtMatrixLayoutAttribute_t attribute, const auto& value) {
      WF_CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof(value)), &key);
    };
    set(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count);
    set(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  }
  return layout;
}

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  // cuBLASLt's A (our B), B (our A), and C = D (see the top of this file).
  cublasLtMatrixLayout_t lt_a = nullptr, lt_b = nullptr, lt_c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // whether the heuristic offered an algorithm
  // The bias and aux pointers are attributes of the descriptor, which every call of this shape
  // shares: they are set and used under this lock.
  std::mutex pointer_mutex;
};

cublasLtEpilogue_t epilogue_of(const PlanKey& key) {
  if (key.gelu) return key.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  return key.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// The epilogue's pointers (bias, aux) of `p` on `desc`.
void set_epilogue_pointers(cublasLtMatmulDesc_t desc, const Product& p, const PlanKey& key) {
  if (p.bias != nullptr) set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias, key);
  if (p.aux != nullptr) set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux, key);
}

void build_plan(cublasLtHandle_t handle, const PlanKey& key, const Product& p, Plan& plan) {
  const Types t = types_of(key.kind, key.tf32);
  WF_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&plan.desc, t.compute, t.scale), &key);
  const std::int32_t op_a = key.tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
  const std::int32_t op_b = key.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a, key);
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b, key);
  if (key.bias || key.gelu) {
    // The bias is D's type (f32 for bf16 operands), the default of CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE;
    // so is the aux matrix (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE is left unset: it is for fp8).
    // The heuristic reads the pointers' alignment, so they are set before asking.
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<std::uint32_t>(epilogue_of(key)), key);
    set_epilogue_pointers(plan.desc, p, key);
    if (key.gelu) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, key.ldc, key);
  }
  plan.lt_a = make_layout(t.operands, key.tb ? key.K : key.N, key.tb ? key.N : key.K, key.ldb, key.batch,
                          key.stride_b, key);
  plan.lt_b = make_layout(t.operands, key.ta ? key.M : key.K, key.ta ? key.K : key.M, key.lda, key.batch,
                          key.stride_a, key);
  plan.lt_c = make_layout(t.result, key.N, key.M, key.ldc, key.batch, key.stride_c, key);

  cublasLtMatmulPreference_t preference = nullptr;
  WF_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&preference), &key);
  const auto set_preference = [&](cublasLtMatmulPreferenceAttributes_t attribute, const auto& value) {
    WF_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)),
                      &key);
  };
  set_preference(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<std::uint64_t>(kWorkspaceBytes));
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);  // cuBLASLt's A is our B
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
  // C is read from the source where there is one (linear_add_forward's residual), D written to p.C.
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_source != 0 ? key.align_source : key.align_c);
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c);
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.lt_a, plan.lt_b, plan.lt_c,
                                                               plan.lt_c, preference, 1, &result, &count);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && count == 0)) return;
  WF_CUBLASLT_CHECK(status, &key);
  WF_CUBLASLT_CHECK(result.state, &key);
  plan.algo = result.algo;
  plan.found = true;
}

// The plan of `key`, made at its first use. Plans live as long as the process (their descriptors
// are destroyed by nobody: the driver may be gone by the time static destructors run).
Plan& plan_for(cublasLtHandle_t handle, const PlanKey& key, const Product& p) {
  static std::mutex mutex;
  static auto* plans = new std::map<PlanKey, std::unique_ptr<Plan>>();
  const std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Plan>& slot = (*plans)[key];
  if (!slot) {
    auto plan = std::make_unique<Plan>();
    build_plan(handle, key, p, *plan);
    slot = std::move(plan);
  }
  return *slot;
}

// ---- per device: the handle; per stream: the workspace -----------------------------------------

struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  std::map<cudaStream_t, void*> workspaces;
};

std::mutex& device_mutex() {
  static std::mutex mutex;
  return mutex;
}
DeviceState& device_state(int device) {  // under device_mutex()
  static auto* states = new std::map<int, DeviceState>();
  return (*states)[device];
}

// The device's cuBLASLt handle, made at its first product (the device is current: native(stream)).
cublasLtHandle_t handle_for(Device device) {
  const std::lock_guard<std::mutex> lock(device_mutex());
  DeviceState& state = device_state(device.index);
  if (state.handle == nullptr) WF_CUBLASLT_CHECK(cublasLtCreate(&state.handle), nullptr);
  return state.handle;
}

// The workspace of products queued on `stream`: one per stream, because products on two streams
// may run at once and must not share scratch memory (cuBLAS keeps one per stream for the same
// reason); within one stream, products run in order. Allocated from the device's allocator at the
// stream's first product and kept for the process. The allocator orders its memory on the
// device's main stream, so another stream waits for that allocation once.
void* workspace_for(const Stream& stream, cudaStream_t native_stream) {
  const Device device = stream.device();
  const std::lock_guard<std::mutex> lock(device_mutex());
  void*& workspace = device_state(device.index).workspaces[native_stream];
  if (workspace == nullptr) {
    workspace = device_backend(device).allocate(device, kWorkspaceBytes).data;
    if (stream.handle() != 0) {
      Event allocated;
      allocated.record(Stream::default_for(device));
      stream.wait(allocated);
    }
  }
  return workspace;
}

// ---- running a product ------------------------------------------------------------------------

// Queues `p` (non-empty, K > 0, alpha != 0) through cuBLASLt; false when the heuristic offers no
// algorithm for its shape (nothing queued).
bool try_matmul(const Stream& stream, cudaStream_t native_stream, const Product& p) {
  const PlanKey key = key_of(stream.device(), p);
  const cublasLtHandle_t handle = handle_for(stream.device());
  Plan& plan = plan_for(handle, key, p);
  if (!plan.found) return false;
  void* workspace = workspace_for(stream, native_stream);
  // The scalars in the scale type, read on the host when the call is queued.
  const float alpha_f = static_cast<float>(p.alpha), beta_f = static_cast<float>(p.beta);
  const bool f64 = p.kind == Kind::f64;
  const void* alpha = f64 ? static_cast<const void*>(&p.alpha) : &alpha_f;
  const void* beta = f64 ? static_cast<const void*>(&p.beta) : &beta_f;
  const auto run = [&] {
    // beta == 0: cuBLASLt does not read C, so NaN in C does not leak (BLAS semantics, as the CPU).
    // C and D share one layout (type, shape, ld): with a source, C is read there and D is p.C.
    const void* c_in = p.source != nullptr ? p.source : p.C;
    WF_CUBLASLT_CHECK(cublasLtMatmul(handle, plan.desc, alpha, p.B, plan.lt_a, p.A, plan.lt_b, beta, c_in, plan.lt_c,
                                     p.C, plan.lt_c, &plan.algo, workspace, kWorkspaceBytes, native_stream),
                      &key);
  };
  if (p.bias == nullptr && p.aux == nullptr) {
    run();
  } else {
    const std::lock_guard<std::mutex> lock(plan.pointer_mutex);
    set_epilogue_pointers(plan.desc, p, key);
    run();
  }
  return true;
}

// The whole of a product without epilogue (p.bias and p.aux null), degenerate shapes as the CPU does them.
void run_product(const Stream& stream, const char* who, const Product& p) {
  check_product(who, p);
  if (p.batch == 0 || p.M == 0 || p.N == 0) return;
  const cudaStream_t native_stream = native(stream);
  if (p.K == 0 || p.alpha == 0.0) {  // C = beta·C without reading A or B
    if (p.kind == Kind::f64) {
      launch_scale_matrices(native_stream, p.batch, p.M, p.N, p.ldc, p.stride_c, p.beta, static_cast<double*>(p.C));
    } else {
      launch_scale_matrices(native_stream, p.batch, p.M, p.N, p.ldc, p.stride_c, static_cast<float>(p.beta),
                            static_cast<float*>(p.C));
    }
    return;
  }
  if (try_matmul(stream, native_stream, p)) return;
  const auto no_algorithm = [&](const Product& q) {
    WF_FAIL("{}: cuBLASLt offers no algorithm for the {} on this GPU", who, describe(key_of(stream.device(), q)));
  };
  if (p.batch == 1) no_algorithm(p);
  // No strided-batched algorithm for this shape (a broadcast operand, an odd stride): one product per item.
  const Types t = types_of(p.kind, false);
  for (std::int64_t i = 0; i < p.batch; ++i) {
    Product item = p;
    item.batch = 1;
    item.A = static_cast<const char*>(p.A) + i * p.stride_a * static_cast<std::int64_t>(t.operand_size);
    item.B = static_cast<const char*>(p.B) + i * p.stride_b * static_cast<std::int64_t>(t.operand_size);
    item.C = static_cast<char*>(p.C) + i * p.stride_c * static_cast<std::int64_t>(t.result_size);
    if (!try_matmul(stream, native_stream, item)) no_algorithm(item);
  }
}

}  // namespace

// ---- the TF32 switch and the description ------------------------------------------------------

namespace {
std::atomic<int>& tf32_state() {  // -1: not decided yet, else 0 or 1
  static std::atomic<int> state{-1};
  return state;
}
}  // namespace

void set_cuda_tf32(bool on) { tf32_state().store(on ? 1 : 0); }

bool cuda_tf32() {
  int state = tf32_state().load();
  if (state < 0) {
    const char* env = std::getenv("WF_CUDA_TF32");
    const std::string_view value = env == nullptr ? "" : env;
    WF_CHECK(value.empty() || value == "0" || value == "1",
             "WF_CUDA_TF32={} is not understood; set it to 1 (f32 products in TF32) or 0 (true f32, the default)",
             value);
    int expected = -1;
    tf32_state().compare_exchange_strong(expected, value == "1" ? 1 : 0);  // set_cuda_tf32 wins a race
    state = tf32_state().load();
  }
  return state == 1;
}

std::string cuda_gemm_description() {
  const std::size_t version = cublasLtGetVersion();
  return fmt::format("cuBLASLt {}.{}.{} (built with {}.{}.{}); f32 products {}", version / 10000, version / 100 % 100,
                     version % 100, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH,
                     cuda_tf32() ? "in TF32 (WF_CUDA_TF32=1 or set_cuda_tf32)" : "in true f32, TF32 off (WF_CUDA_TF32=1 turns it on)");
}

// ---- the entries --------------------------------------------------------------------------------

void CudaKernels::gemm(const Stream& stream, DType dtype, bool trans_a, bool trans_b, std::int64_t M, std::int64_t N,
                       std::int64_t K, double alpha, const void* A, std::int64_t lda, const void* B, std::int64_t ldb,
                       double beta, void* C, std::int64_t ldc) {
  run_product(stream, "gemm",
              {floating_kind(dtype, "gemm"), trans_a, trans_b, 1, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc,
               0, nullptr, nullptr, nullptr});
}

void CudaKernels::gemm_batched(const Stream& stream, DType dtype, bool trans_a, bool trans_b, std::int64_t batch,
                               std::int64_t M, std::int64_t N, std::int64_t K, double alpha, const void* A,
                               std::int64_t lda, std::int64_t stride_a, const void* B, std::int64_t ldb,
                               std::int64_t stride_b, double beta, void* C, std::int64_t ldc, std::int64_t stride_c) {
  run_product(stream, "gemm_batched",
              {floating_kind(dtype, "gemm_batched"), trans_a, trans_b, batch, M, N, K, alpha, A, lda, stride_a, B, ldb,
               stride_b, beta, C, ldc, stride_c, nullptr, nullptr, nullptr});
}

void CudaKernels::gemm_bf16(const Stream& stream, bool trans_a, bool trans_b, std::int64_t M, std::int64_t N,
                            std::int64_t K, float alpha, const bf16* A, std::int64_t lda, const bf16* B,
                            std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  run_product(stream, "gemm_bf16",
              {Kind::bf16, trans_a, trans_b, 1, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, nullptr,
               nullptr, nullptr});
}

// y = x·Wᵀ with the bias added by cuBLASLt's epilogue (one pass over y instead of two). Where the
// epilogue has no algorithm (f64 on some GPUs, a misaligned bias) or nothing is multiplied
// (in_features 0), the product and add_bias run one after the other: the CPU's order.
void CudaKernels::linear_forward(const Stream& stream, DType operands, std::int64_t rows, std::int64_t in_features,
                                 std::int64_t out_features, const void* x, const void* weight, const void* bias,
                                 void* y) {
  const Kind kind = operands == DType::bf16 ? Kind::bf16 : floating_kind(operands, "linear_forward");
  Product p{kind, false, true, 1, rows, out_features, in_features, 1.0, x, in_features, 0,
            weight, in_features, 0, 0.0, y, out_features, 0, nullptr, nullptr, nullptr};
  check_product("linear_forward", p);
  if (rows == 0 || out_features == 0) return;
  if (bias != nullptr && in_features > 0) {
    p.bias = bias;
    if (try_matmul(stream, native(stream), p)) return;
    p.bias = nullptr;
  }
  run_product(stream, "linear_forward", p);
  if (bias != nullptr) {
    add_bias(stream, kind == Kind::f64 ? DType::f64 : DType::f32, rows, out_features, y, bias, y);
  }
}

// y = gelu(x·Wᵀ + bias) with the pre-activation beside it, in the product's epilogue
// (CUBLASLT_EPILOGUE_GELU_AUX_BIAS, or GELU_AUX without bias): one pass over the activation
// instead of three (the product's write, the GELU's read and write).
//
// Which GELU. cuBLASLt's documentation of cublasLtEpilogue_t (and cublasLt.h) says only "apply GELU
// point-wise transform"; that it is the tanh approximation (GPT-2's, the CPU's
// kernels/cpu/elementwise.cpp) is what PyTorch relies on: its addmm with the GELU epilogue
// (aten/src/ATen/native/cuda/Blas.cpp, behind torch._addmm_activation(..., use_gelu=True)) applies
// at::gelu_(result, "tanh") wherever it cannot use the epilogue, so that both paths give the same
// function. tests/cuda/test_gemm.cpp checks it against the CPU's tanh GELU on the first GPU run.
//
// Its rules (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD): the aux leading dimension, in
// elements, is divisible by 8 and at least the rows of the column-major D (our out_features).
// Where that fails, where cuBLASLt offers no algorithm for the epilogue (f64 on some GPUs, an
// unaligned pointer), or where nothing is multiplied (in_features 0), the entry is the backend's
// default composition: linear_forward, then the GELU kernel over the pre-activation. The first
// two are logged once per process each.
void CudaKernels::linear_gelu_forward(const Stream& stream, DType operands, std::int64_t rows,
                                      std::int64_t in_features, std::int64_t out_features, const void* x,
                                      const void* weight, const void* bias, void* pre, void* y) {
  const Kind kind = operands == DType::bf16 ? Kind::bf16 : floating_kind(operands, "linear_gelu_forward");
  const Product p{kind, false, true, 1, rows, out_features, in_features, 1.0, x, in_features, 0,
                  weight, in_features, 0, 0.0, y, out_features, 0, bias, pre, nullptr};
  check_product("linear_gelu_forward", p);
  if (rows == 0 || out_features == 0) return;
  WF_CHECK(pre != nullptr, "linear_gelu_forward: the pre-activation buffer is null for a non-empty [{}, {}] result",
           rows, out_features);
  const auto composition = [&] {
    Backend::linear_gelu_forward(stream, operands, rows, in_features, out_features, x, weight, bias, pre, y);
  };
  const auto log_once = [](std::atomic<bool>& logged, const std::string& why) {
    if (!logged.exchange(true)) {
      log::info("linear_gelu_forward: {}; the product and the GELU run one after the other (said once)", why);
    }
  };
  static std::atomic<bool> logged_ld{false}, logged_algorithm{false};
  if (in_features == 0) return composition();
  if (out_features % 8 != 0) {
    log_once(logged_ld, fmt::format("out_features={} is not a multiple of 8, which cuBLASLt's GELU epilogue needs of "
                                    "the pre-activation's leading dimension",
                                    out_features));
    return composition();
  }
  if (try_matmul(stream, native(stream), p)) return;
  log_once(logged_algorithm, fmt::format("cuBLASLt offers no algorithm with the GELU epilogue for the {}",
                                         describe(key_of(stream.device(), p))));
  composition();
}

// Every dtype tries the epilogue (backend.h: bf16 activations then skip the rounding of the
// pre-activation to bf16 before the GELU that their unfused path has).
bool CudaKernels::fuses_linear_gelu(DType operands) const {
  return operands == DType::f32 || operands == DType::f64 || operands == DType::bf16;
}

// y = residual + x·Wᵀ + bias in one product: cuBLASLt's D = alpha·op(A)·op(B) + beta·C with C the
// residual (beta 1, read from its own buffer, D's layout and type) and the bias epilogue
// (CUBLASLT_EPILOGUE_BIAS, or none without bias): one pass over the output instead of three (the
// product's write, the add's two reads and its write). The sum is rounded once, where the
// composition rounds linear's output first: within an ulp or so of it, not its bits.
// Where cuBLASLt offers no algorithm (f64 on some GPUs, an unaligned pointer) or nothing is
// multiplied (in_features 0), the entry is the backend's default composition: linear_forward, then
// the add kernel; the first is logged once per process.
void CudaKernels::linear_add_forward(const Stream& stream, DType operands, std::int64_t rows,
                                     std::int64_t in_features, std::int64_t out_features, const void* x,
                                     const void* weight, const void* bias, const void* residual, void* y) {
  const Kind kind = operands == DType::bf16 ? Kind::bf16 : floating_kind(operands, "linear_add_forward");
  const Product p{kind, false, true, 1, rows, out_features, in_features, 1.0, x, in_features, 0,
                  weight, in_features, 0, 1.0, y, out_features, 0, bias, nullptr, residual};
  check_product("linear_add_forward", p);
  if (rows == 0 || out_features == 0) return;
  WF_CHECK(residual != nullptr, "linear_add_forward: the residual is null for a non-empty [{}, {}] result", rows,
           out_features);
  WF_CHECK(residual != y, "linear_add_forward: y aliases the residual; pass a separate output buffer");
  const auto composition = [&] {
    Backend::linear_add_forward(stream, operands, rows, in_features, out_features, x, weight, bias, residual, y);
  };
  if (in_features == 0) return composition();
  if (try_matmul(stream, native(stream), p)) return;
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    log::info("linear_add_forward: cuBLASLt offers no algorithm adding the residual as C for the {}; the product and "
              "the add run one after the other (said once)",
              describe(key_of(stream.device(), p)));
  }
  composition();
}

// Every dtype tries the epilogue (backend.h: bf16 activations then skip the rounding of linear's
// output to bf16 before the add that their unfused path has).
bool CudaKernels::fuses_linear_add(DType operands) const {
  return operands == DType::f32 || operands == DType::f64 || operands == DType::bf16;
}

}  // namespace wf::kernels::cuda
