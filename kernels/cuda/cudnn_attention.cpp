// cuDNN's fused attention through the backend C API (cudnn_attention.h says what and when).
//
// The graphs are those cudnn-frontend builds for cuDNN 9.19 (its UnifiedSDPANode for the native
// operation, CompositeSDPANode and CompositeSDPABackwardNode for the composite ones), written out
// here op by op: cuDNN's fused engines recognise these patterns, so the order of the operations,
// the data types of the intermediate tensors and the transposed views of K and V follow them.
// Tensors are 4-D [batch, heads, sequence, head_dim] views with the strides of kernel_args.h's
// [batch, sequence, heads, head_dim] rows; every plan is built once per CudnnPlanKey and cached.
//
// Compiled and linked, never run: no GPU was reachable when this was written (docs/gpu.md).
#include "kernels/cuda/cudnn_attention.h"

#include <fmt/format.h>

#include "kernels/cuda/dispatch.h"
#include "src/core/cuda/cuda_device.h"
#include "wallfacer/core/error.h"

#if WF_HAVE_CUDNN
#include <cudnn.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/cuda/elementwise.h"
#include "src/core/cuda/convert.h"
#include "src/core/cuda/cuda_check.h"
#include "wallfacer/core/log.h"
#endif

namespace wf::kernels::cuda {

std::string cudnn_attention_refusal(const AttentionShape& s, DType operands) {
#if !WF_HAVE_CUDNN
  (void)s;
  (void)operands;
  return "this build has no cuDNN (WF_CUDNN off: cudnn.h or libcudnn not found at configure time)";
#else
  if (operands != DType::bf16) return "operands are not bf16";
  if (s.windows.ranges != nullptr) return "key windows (packed documents; cuDNN's graphs here have no per-row mask)";
  if (s.q_len < 1 || s.kv_len < 1) return "an empty side";
  if (s.q_len == 1 && s.kv_len == 1) return "q_len = kv_len = 1 (cuDNN's backward refuses it)";
  if (s.head_dim % 8 != 0 || s.head_dim > 128) return "head_dim is not a multiple of 8 at most 128";
  if (s.heads % s.kv_heads != 0) return "heads is not a multiple of kv_heads";
  if (!std::isfinite(attention_scale(s))) return "the scale is not finite";
  if (cudnn_mask(s) != CudnnMask::none) {
    const std::int64_t shift = s.q_offset - s.kv_offset;
    if (shift != 0 && !(shift == s.kv_len - s.q_len && shift > 0)) {
      return "a causal diagonal other than top-left (q_offset == kv_offset) or bottom-right (q_offset - kv_offset "
             "== kv_len - q_len)";
    }
  }
  // Sizes cuDNN takes as int32 (the bottom-right shift) and that its engines index.
  if (s.q_len > std::numeric_limits<std::int32_t>::max() || s.kv_len > std::numeric_limits<std::int32_t>::max()) {
    return "a sequence longer than 2^31 - 1";
  }
  return "";
#endif
}

CudnnMask cudnn_mask(const AttentionShape& s) {
  // A causal block wholly in the queries' past (a ring step's earlier block) masks nothing.
  if (!s.causal || s.kv_offset + s.kv_len - 1 <= s.q_offset) return CudnnMask::none;
  return s.q_offset == s.kv_offset ? CudnnMask::top_left : CudnnMask::bottom_right;
}

CudnnPlanKey cudnn_plan_key(int device, const AttentionShape& s, bool backward) {
  return {device, s.batch, s.q_len, s.kv_len, s.heads, s.kv_heads, s.head_dim, cudnn_mask(s), backward};
}

std::string cudnn_plan_key_text(const CudnnPlanKey& k) {
  static const char* const masks[] = {"full", "causal top-left", "causal bottom-right"};
  return fmt::format("cuda:{} {} batch {} q_len {} kv_len {} heads {}/{} head_dim {} {}", k.device,
                     k.backward ? "backward" : "forward", k.batch, k.q_len, k.kv_len, k.heads, k.kv_heads, k.head_dim,
                     masks[static_cast<int>(k.mask)]);
}

#if !WF_HAVE_CUDNN

bool cudnn_attention_forward(const Stream&, const AttentionShape&, const void*, const void*, const void*, float*,
                             float*) {
  return false;
}
bool cudnn_attention_backward(const Stream&, const AttentionShape&, const void*, const void*, const void*,
                              const float*, const float*, const void*, float*, float*, float*, bool) {
  return false;
}
std::string cudnn_plan_kind(const CudnnPlanKey&) { return ""; }
std::string cudnn_version_text() { return ""; }

#else

namespace {

// ---- errors and descriptors ---------------------------------------------------------------------

[[noreturn]] void fail(cudnnStatus_t status, const std::string& what) {
  char last[512] = {};
  cudnnGetLastErrorString(last, sizeof last);
  WF_FAIL("cuDNN attention: {} failed: {}{}{}", what, cudnnGetErrorString(status), last[0] ? ": " : "", last);
}
void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) fail(status, what);
}

// One cudnnBackendDescriptor_t, destroyed with its owner.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type, const char* name) : name_(name) {
    check(cudnnBackendCreateDescriptor(type, &desc_), name);
  }
  ~Desc() {
    if (desc_) cudnnBackendDestroyDescriptor(desc_);
  }
  Desc(Desc&& other) noexcept : desc_(std::exchange(other.desc_, nullptr)), name_(other.name_) {}
  Desc& operator=(Desc&&) = delete;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }
  const char* name() const { return name_; }
  // Sets `count` values of attribute `attribute` (its name, for the error message).
  void set(cudnnBackendAttributeName_t attribute, const char* attribute_name, cudnnBackendAttributeType_t type,
           std::int64_t count, const void* values) {
    const cudnnStatus_t status = cudnnBackendSetAttribute(desc_, attribute, type, count, values);
    if (status != CUDNN_STATUS_SUCCESS) fail(status, std::string(name_) + " attribute " + attribute_name);
  }
  void finalize() {
    const cudnnStatus_t status = cudnnBackendFinalize(desc_);
    if (status != CUDNN_STATUS_SUCCESS) fail(status, std::string("finalizing ") + name_);
  }

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
  const char* name_;
};
// The attribute's own name in the message.
#define WF_CUDNN_SET(desc, attribute, type, count, values) (desc).set(attribute, #attribute, type, count, values)

// ---- graph building -------------------------------------------------------------------------------

// The non-virtual tensors' unique ids (the variant pack's keys); virtual ones count up from kFirstVirtual.
enum Uid : std::int64_t {
  kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV,
  kScale, kNegInf, kOne, kSkv, kSq,       // by-value scalars
  kSoftmaxSum, kDQAccum,                  // f32 scratch the composite backward keeps in device memory
  kFirstVirtual = 1000,
};

using Dims = std::vector<std::int64_t>;

// The tensors and operations of one graph, kept alive as long as the plan built from it.
class Graph {
 public:
  explicit Graph(cudnnHandle_t handle) : handle_(handle) {}

  // A tensor descriptor; virtual ones get the next free id.
  cudnnBackendDescriptor_t tensor(std::int64_t uid, cudnnDataType_t type, const Dims& dims, const Dims& strides,
                                  bool is_virtual = false, bool by_value = false) {
    Desc& t = keep(Desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor descriptor"));
    const std::int64_t alignment = 16;
    WF_CUDNN_SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    WF_CUDNN_SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    WF_CUDNN_SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<std::int64_t>(dims.size()),
                 dims.data());
    WF_CUDNN_SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<std::int64_t>(strides.size()),
                 strides.data());
    WF_CUDNN_SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    WF_CUDNN_SET(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) WF_CUDNN_SET(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    t.finalize();
    return t.get();
  }
  cudnnBackendDescriptor_t virtual_tensor(cudnnDataType_t type, const Dims& dims, const Dims& strides) {
    return tensor(next_virtual_++, type, dims, strides, true);
  }
  // A scalar passed by value at execution (the variant pack points at host memory).
  cudnnBackendDescriptor_t scalar(std::int64_t uid, cudnnDataType_t type) {
    return tensor(uid, type, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  }

  // y = mode(x[, b[, t]]) computed in `math`; axis for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, cudnnDataType_t math = CUDNN_DATA_FLOAT,
                 std::int64_t axis = -1) {
    Desc& pw = keep(Desc(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise descriptor"));
    WF_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    WF_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) WF_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    pw.finalize();
    Desc& op = operation(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
    cudnnBackendDescriptor_t pw_desc = pw.get();
    WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw_desc);
    WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    if (b) WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    const float one = 1.0f;
    WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    op.finalize();
  }
  // c = a·b over the last two dimensions, batched over the first two (b's heads broadcast to a's: GQA).
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    Desc& mm = keep(Desc(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul descriptor"));
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    WF_CUDNN_SET(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    mm.finalize();
    Desc& op = operation(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation");
    cudnnBackendDescriptor_t mm_desc = mm.get();
    WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm_desc);
    op.finalize();
  }
  // y = reduce(x) over the dimensions where y is smaller.
  void reduction(cudnnReduceTensorOp_t reduce, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    Desc& rd = keep(Desc(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction descriptor"));
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    WF_CUDNN_SET(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    WF_CUDNN_SET(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce);
    rd.finalize();
    Desc& op = operation(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation");
    cudnnBackendDescriptor_t rd_desc = rd.get();
    WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd_desc);
    WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    op.finalize();
  }
  // y: another view (dims, strides) of x's elements.
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    Desc& op = operation(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape operation");
    WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    op.finalize();
  }
  // An operation whose attributes the caller sets (and finalizes): the native SDPA ones.
  Desc& operation(cudnnBackendDescriptorType_t type, const char* name) {
    Desc& op = keep(Desc(type, name));
    ops_.push_back(op.get());
    return op;
  }

  // The operation graph of everything added, finalized.
  cudnnBackendDescriptor_t finalize() {
    Desc& graph = keep(Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph"));
    WF_CUDNN_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
    WF_CUDNN_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                 static_cast<std::int64_t>(ops_.size()), ops_.data());
    graph.finalize();
    return graph.get();
  }

 private:
  Desc& keep(Desc d) {
    descs_.push_back(std::make_unique<Desc>(std::move(d)));
    return *descs_.back();
  }
  cudnnHandle_t handle_;
  std::vector<std::unique_ptr<Desc>> descs_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  std::int64_t next_virtual_ = kFirstVirtual;
};

// ---- the views of kernel_args.h's layouts --------------------------------------------------------

// [batch, seq, heads, d] rows seen as [batch, heads, seq, d].
Dims bhsd_dims(std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t d) { return {b, h, s, d}; }
Dims bshd_strides(std::int64_t h, std::int64_t s, std::int64_t d) { return {s * h * d, d, h * d, 1}; }
// The same rows seen transposed, [batch, heads, d, seq] (Kᵀ, Vᵀ).
Dims transposed_dims(std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t d) { return {b, h, d, s}; }
Dims transposed_strides(std::int64_t h, std::int64_t s, std::int64_t d) { return {s * h * d, d, 1, h * d}; }
// Dense [batch, heads, rows, cols].
Dims dense_strides(std::int64_t h, std::int64_t rows, std::int64_t cols) {
  return {h * rows * cols, rows * cols, cols, 1};
}

// The score-shaped intermediates and the per-row statistics of one key.
struct Sizes {
  std::int64_t b, h, hk, sq, skv, d;
  Dims scores() const { return {b, h, sq, skv}; }
  Dims scores_strides() const { return dense_strides(h, sq, skv); }
  Dims rows() const { return {b, h, sq, 1}; }
  Dims rows_strides() const { return {h * sq, sq, 1, 1}; }
};
Sizes sizes_of(const CudnnPlanKey& key) {
  return {key.batch, key.heads, key.kv_heads, key.q_len, key.kv_len, key.head_dim};
}

// score where the causal mask keeps it, −inf elsewhere (the frontend's composite diagonal band mask:
// row [+ s_kv − s_q] >= col).
cudnnBackendDescriptor_t causal_mask(Graph& g, const Sizes& z, CudnnMask mask, cudnnBackendDescriptor_t score) {
  cudnnBackendDescriptor_t row = g.virtual_tensor(CUDNN_DATA_INT32, z.scores(), z.scores_strides());
  cudnnBackendDescriptor_t col = g.virtual_tensor(CUDNN_DATA_INT32, z.scores(), z.scores_strides());
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, score, nullptr, nullptr, row, CUDNN_DATA_FLOAT, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, score, nullptr, nullptr, col, CUDNN_DATA_FLOAT, 3);
  if (mask == CudnnMask::bottom_right) {
    cudnnBackendDescriptor_t plus_skv = g.virtual_tensor(CUDNN_DATA_INT32, z.scores(), z.scores_strides());
    g.pointwise(CUDNN_POINTWISE_ADD, row, g.scalar(kSkv, CUDNN_DATA_INT32), nullptr, plus_skv, CUDNN_DATA_INT32);
    cudnnBackendDescriptor_t shifted = g.virtual_tensor(CUDNN_DATA_INT32, z.scores(), z.scores_strides());
    g.pointwise(CUDNN_POINTWISE_SUB, plus_skv, g.scalar(kSq, CUDNN_DATA_INT32), nullptr, shifted, CUDNN_DATA_INT32);
    row = shifted;
  }
  cudnnBackendDescriptor_t keep = g.virtual_tensor(CUDNN_DATA_BOOLEAN, z.scores(), z.scores_strides());
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, keep, CUDNN_DATA_BOOLEAN);
  cudnnBackendDescriptor_t masked = g.virtual_tensor(CUDNN_DATA_FLOAT, z.scores(), z.scores_strides());
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, score, g.scalar(kNegInf, CUDNN_DATA_FLOAT), keep, masked);
  return masked;
}

// The non-virtual operands every graph reads or writes, in the views above.
struct Operands {
  cudnnBackendDescriptor_t q, o, stats, d_o, dq;  // q side
  cudnnBackendDescriptor_t k, v, dk, dv;          // kv side, untransposed
};
Operands forward_operands(Graph& g, const Sizes& z, bool transposed_k) {
  Operands t{};
  t.q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, bhsd_dims(z.b, z.h, z.sq, z.d), bshd_strides(z.h, z.sq, z.d));
  t.k = transposed_k ? g.tensor(kK, CUDNN_DATA_BFLOAT16, transposed_dims(z.b, z.hk, z.skv, z.d),
                                transposed_strides(z.hk, z.skv, z.d))
                     : g.tensor(kK, CUDNN_DATA_BFLOAT16, bhsd_dims(z.b, z.hk, z.skv, z.d),
                                bshd_strides(z.hk, z.skv, z.d));
  t.v = g.tensor(kV, CUDNN_DATA_BFLOAT16, bhsd_dims(z.b, z.hk, z.skv, z.d), bshd_strides(z.hk, z.skv, z.d));
  t.o = g.tensor(kO, CUDNN_DATA_BFLOAT16, bhsd_dims(z.b, z.h, z.sq, z.d), bshd_strides(z.h, z.sq, z.d));
  t.stats = g.tensor(kStats, CUDNN_DATA_FLOAT, z.rows(), z.rows_strides());
  return t;
}

// ---- the four graphs ----------------------------------------------------------------------------

void native_forward(Graph& g, const Sizes& z) {
  const Operands t = forward_operands(g, z, false);
  cudnnBackendDescriptor_t scale = g.scalar(kScale, CUDNN_DATA_FLOAT);
  Desc& op = g.operation(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, "SDPA forward operation");
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.q);
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.k);
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.v);
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.o);
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.stats);
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &scale);
  op.finalize();
}

// S = Q·Kᵀ·scale [masked]; softmax with Stats = max + log Σ exp; O = P·V (P in bf16).
void composite_forward(Graph& g, const Sizes& z, CudnnMask mask) {
  const Operands t = forward_operands(g, z, true);
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t s = g.virtual_tensor(f32, z.scores(), z.scores_strides());
  g.matmul(t.q, t.k, s);
  cudnnBackendDescriptor_t scaled = g.virtual_tensor(f32, z.scores(), z.scores_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, s, g.scalar(kScale, f32), nullptr, scaled);
  if (mask != CudnnMask::none) scaled = causal_mask(g, z, mask, scaled);
  cudnnBackendDescriptor_t max = g.virtual_tensor(f32, z.rows(), z.rows_strides());
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, scaled, max);
  cudnnBackendDescriptor_t shifted = g.virtual_tensor(f32, z.scores(), z.scores_strides());
  g.pointwise(CUDNN_POINTWISE_SUB, scaled, max, nullptr, shifted);
  cudnnBackendDescriptor_t e = g.virtual_tensor(f32, z.scores(), z.scores_strides());
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, nullptr, nullptr, e);
  cudnnBackendDescriptor_t sum = g.virtual_tensor(f32, z.rows(), z.rows_strides());
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  cudnnBackendDescriptor_t log_sum = g.virtual_tensor(f32, z.rows(), z.rows_strides());
  g.pointwise(CUDNN_POINTWISE_LOG, sum, nullptr, nullptr, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, max, log_sum, nullptr, t.stats);
  cudnnBackendDescriptor_t p = g.virtual_tensor(CUDNN_DATA_BFLOAT16, z.scores(), z.scores_strides());
  g.pointwise(CUDNN_POINTWISE_DIV, e, sum, nullptr, p);
  g.matmul(p, t.v, t.o);
}

Operands backward_operands(Graph& g, const Sizes& z, bool transposed_kv) {
  Operands t = forward_operands(g, z, transposed_kv);
  if (transposed_kv) {
    t.v = g.tensor(kV, CUDNN_DATA_BFLOAT16, transposed_dims(z.b, z.hk, z.skv, z.d),
                   transposed_strides(z.hk, z.skv, z.d));
  }
  t.d_o = g.tensor(kDO, CUDNN_DATA_BFLOAT16, bhsd_dims(z.b, z.h, z.sq, z.d), bshd_strides(z.h, z.sq, z.d));
  t.dq = g.tensor(kDQ, CUDNN_DATA_BFLOAT16, bhsd_dims(z.b, z.h, z.sq, z.d), bshd_strides(z.h, z.sq, z.d));
  t.dk = g.tensor(kDK, CUDNN_DATA_BFLOAT16, bhsd_dims(z.b, z.hk, z.skv, z.d), bshd_strides(z.hk, z.skv, z.d));
  t.dv = g.tensor(kDV, CUDNN_DATA_BFLOAT16, bhsd_dims(z.b, z.hk, z.skv, z.d), bshd_strides(z.hk, z.skv, z.d));
  return t;
}

void native_backward(Graph& g, const Sizes& z) {
  const Operands t = backward_operands(g, z, false);
  cudnnBackendDescriptor_t scale = g.scalar(kScale, CUDNN_DATA_FLOAT);
  Desc& op = g.operation(CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR, "SDPA backward operation");
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.q);
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.k);
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.v);
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.o);
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.stats);
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &scale);
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.d_o);
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.dq);
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.dk);
  WF_CUDNN_SET(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.dv);
  op.finalize();
}

// A gradient of the kv side from its per-query-head product: straight into `out` without GQA, else
// through a [b, h, skv, d] bf16 intermediate summed over each kv head's group of query heads.
void kv_gradient(Graph& g, const Sizes& z, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t out) {
  if (z.h == z.hk) {
    g.matmul(a, b, out);
    return;
  }
  cudnnBackendDescriptor_t full = g.virtual_tensor(CUDNN_DATA_BFLOAT16, {z.b, z.h, z.skv, z.d},
                                                   dense_strides(z.h, z.skv, z.d));
  g.matmul(a, b, full);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
}

// D = rowsum(dO∘O) (kept in f32 device memory, kSoftmaxSum); P = exp(S·scale [masked] − Stats);
// dV = Pᵀ·dO; dS = P∘(dO·Vᵀ − D)·scale; dK = dSᵀ·Q; dQ = dS·K through f32 kDQAccum.
void composite_backward(Graph& g, const Sizes& z, CudnnMask mask) {
  const Operands t = backward_operands(g, z, true);
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, bf16 = CUDNN_DATA_BFLOAT16;
  cudnnBackendDescriptor_t scale = g.scalar(kScale, f32);

  // (The strides cudnn-frontend gives this virtual product, copied as they are.)
  cudnnBackendDescriptor_t do_o =
      g.virtual_tensor(f32, {z.b, z.h, z.sq, z.d}, {z.h * z.sq * z.d, z.sq * z.d, z.h * z.d, 1});
  g.pointwise(CUDNN_POINTWISE_MUL, t.d_o, t.o, nullptr, do_o);
  cudnnBackendDescriptor_t row_dot = g.virtual_tensor(f32, z.rows(), z.rows_strides());
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, do_o, row_dot);
  cudnnBackendDescriptor_t softmax_sum = g.tensor(kSoftmaxSum, f32, z.rows(), z.rows_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, row_dot, g.scalar(kOne, f32), nullptr, softmax_sum);

  cudnnBackendDescriptor_t s = g.virtual_tensor(f32, z.scores(), z.scores_strides());
  g.matmul(t.q, t.k, s);
  cudnnBackendDescriptor_t scaled = g.virtual_tensor(f32, z.scores(), z.scores_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, s, scale, nullptr, scaled);
  cudnnBackendDescriptor_t centred = g.virtual_tensor(f32, z.scores(), z.scores_strides());
  g.pointwise(CUDNN_POINTWISE_SUB, scaled, t.stats, nullptr, centred);
  if (mask != CudnnMask::none) centred = causal_mask(g, z, mask, centred);
  cudnnBackendDescriptor_t p = g.virtual_tensor(f32, z.scores(), z.scores_strides());
  g.pointwise(CUDNN_POINTWISE_EXP, centred, nullptr, nullptr, p);

  // Pᵀ and dSᵀ: the [b, h, sq, skv] scores read as [b, h, skv, sq].
  const Dims transposed_scores{z.b, z.h, z.skv, z.sq};
  const Dims transposed_scores_strides{z.h * z.sq * z.skv, z.sq * z.skv, 1, z.skv};
  cudnnBackendDescriptor_t p_t = g.virtual_tensor(bf16, transposed_scores, transposed_scores_strides);
  g.reshape(p, p_t);
  kv_gradient(g, z, p_t, t.d_o, t.dv);

  cudnnBackendDescriptor_t dp = g.virtual_tensor(f32, z.scores(), z.scores_strides());
  g.matmul(t.d_o, t.v, dp);
  cudnnBackendDescriptor_t dp_minus = g.virtual_tensor(f32, z.scores(), z.scores_strides());
  g.pointwise(CUDNN_POINTWISE_SUB, dp, softmax_sum, nullptr, dp_minus);
  cudnnBackendDescriptor_t ds_unscaled = g.virtual_tensor(f32, z.scores(), z.scores_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, dp_minus, p, nullptr, ds_unscaled);
  cudnnBackendDescriptor_t ds = g.virtual_tensor(f32, z.scores(), z.scores_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, ds_unscaled, scale, nullptr, ds);

  cudnnBackendDescriptor_t ds_t = g.virtual_tensor(bf16, transposed_scores, transposed_scores_strides);
  g.reshape(ds, ds_t);
  kv_gradient(g, z, ds_t, t.q, t.dk);

  // K in its own layout again (t.k is the transposed view).
  cudnnBackendDescriptor_t k = g.virtual_tensor(bf16, bhsd_dims(z.b, z.hk, z.skv, z.d), bshd_strides(z.hk, z.skv, z.d));
  g.reshape(t.k, k);
  cudnnBackendDescriptor_t dq_accum = g.tensor(kDQAccum, f32, {z.b, z.h, z.sq, z.d}, dense_strides(z.h, z.sq, z.d));
  g.matmul(ds, k, dq_accum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, nullptr, nullptr, t.dq);
}

// ---- plans --------------------------------------------------------------------------------------

struct Plan {
  std::unique_ptr<Graph> graph;  // what the plan was built from
  std::unique_ptr<Desc> plan;
  std::int64_t workspace = 0;
  const char* kind = "";     // "native SDPA operation" or "composite graph"
  bool f32_scratch = false;  // the composite backward: kSoftmaxSum and kDQAccum live in device memory
};

// The first engine configuration of heuristics mode A that finalizes into a plan; null when none.
std::unique_ptr<Desc> first_plan(cudnnHandle_t handle, cudnnBackendDescriptor_t graph, std::string& why) {
  Desc heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  WF_CUDNN_SET(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  WF_CUDNN_SET(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  heuristics.finalize();
  std::int64_t count = 0;
  check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                 &count, nullptr),
        "engine heuristics attribute CUDNN_ATTR_ENGINEHEUR_RESULTS (count)");
  if (count <= 0) {
    why = "the heuristics offer no engine configuration";
    return nullptr;
  }
  std::vector<Desc> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine configuration");
    raw.push_back(configs.back().get());
  }
  std::int64_t returned = 0;
  check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                 &returned, raw.data()),
        "engine heuristics attribute CUDNN_ATTR_ENGINEHEUR_RESULTS");
  for (std::int64_t i = 0; i < returned && i < count; ++i) {
    auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
    WF_CUDNN_SET(*plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    WF_CUDNN_SET(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
    const cudnnStatus_t status = cudnnBackendFinalize(plan->get());
    if (status == CUDNN_STATUS_SUCCESS) return plan;
    why = std::string("no engine configuration finalizes (the last: ") + cudnnGetErrorString(status) + ")";
  }
  if (returned <= 0) why = "the heuristics returned no engine configuration";
  return nullptr;
}

// The graph `build` adds, planned; null (with why) when cuDNN refuses the graph or offers no plan.
template <class Build>
std::unique_ptr<Plan> plan_graph(cudnnHandle_t handle, Build&& build, const char* kind, bool f32_scratch,
                                 std::string& why) {
  auto plan = std::make_unique<Plan>();
  plan->graph = std::make_unique<Graph>(handle);
  plan->kind = kind;
  plan->f32_scratch = f32_scratch;
  try {
    build(*plan->graph);
    cudnnBackendDescriptor_t graph = plan->graph->finalize();
    plan->plan = first_plan(handle, graph, why);
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
  if (!plan->plan) return nullptr;
  return plan;
}

// ---- handles and the cache ------------------------------------------------------------------------

struct Handle {
  cudnnHandle_t handle = nullptr;
  std::mutex mutex;  // a handle serves one call at a time (its stream is per call)
};

struct Cache {
  std::mutex mutex;
  std::map<int, std::unique_ptr<Handle>> handles;
  std::map<CudnnPlanKey, std::shared_ptr<const Plan>> plans;  // null: no engine takes the shape
};
Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: cuDNN may be unloaded before static destructors run
  return *c;
}

Handle& handle_for(Device device) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  std::unique_ptr<Handle>& h = c.handles[device.index];
  if (!h) {
    auto made = std::make_unique<Handle>();
    detail::cuda_set_device(device);
    check(cudnnCreate(&made->handle), "cudnnCreate");
    h = std::move(made);
  }
  return *h;
}

std::int64_t workspace_size(const Desc& plan) {
  std::int64_t size = 0, count = 0;
  check(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count,
                                 &size),
        "execution plan attribute CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE");
  return size;
}

// WF_CUDNN_NATIVE_SDPA=0 plans full attention with the composite graph too (a first GPU run can
// tell the native operation's results from the composite graph's this way).
bool native_sdpa_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("WF_CUDNN_NATIVE_SDPA");
    return !(v && std::string_view(v) == "0");
  }();
  return allowed;
}

// The cached plan of `key`, built at first use: the native operation for full attention, else (or
// when no engine takes it) the composite graph. Null when neither plans.
std::shared_ptr<const Plan> plan_for(const CudnnPlanKey& key, Handle& h) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (auto it = c.plans.find(key); it != c.plans.end()) return it->second;
  std::lock_guard<std::mutex> handle_lock(h.mutex);  // planning uses the handle too
  const cudnnHandle_t handle = h.handle;
  detail::cuda_set_device(Device::cuda(key.device));
  const Sizes z = sizes_of(key);
  std::string why_native, why;
  std::unique_ptr<Plan> plan;
  if (key.mask == CudnnMask::none && native_sdpa_allowed()) {
    plan = plan_graph(
        handle, [&](Graph& g) { key.backward ? native_backward(g, z) : native_forward(g, z); },
        "native SDPA operation", false, why_native);
  }
  if (!plan) {
    const auto build = [&](Graph& g) {
      key.backward ? composite_backward(g, z, key.mask) : composite_forward(g, z, key.mask);
    };
    plan = plan_graph(handle, build, "composite graph", key.backward, why);
  }
  if (plan) {
    plan->workspace = workspace_size(*plan->plan);
    log::debug("cuDNN attention: {} planned ({}; workspace {} bytes)", cudnn_plan_key_text(key), plan->kind,
               plan->workspace);
  } else {
    log::info("cuDNN attention: no plan for {} ({}{}); the own kernel runs it", cudnn_plan_key_text(key),
              why_native.empty() ? "" : "native: " + why_native + "; composite: ", why);
  }
  std::shared_ptr<const Plan> shared = std::move(plan);
  c.plans.emplace(key, shared);
  return shared;
}

// Runs `plan` on `stream` with the variant pack of these ids and pointers.
void execute(Handle& h, const Plan& plan, cudaStream_t stream, const std::vector<std::int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace) {
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
  WF_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<std::int64_t>(uids.size()),
               uids.data());
  WF_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
               static_cast<std::int64_t>(pointers.size()), pointers.data());
  WF_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  std::lock_guard<std::mutex> lock(h.mutex);
  check(cudnnSetStream(h.handle, stream), "cudnnSetStream");
  check(cudnnBackendExecute(h.handle, plan.plan->get(), pack.get()), "cudnnBackendExecute");
}

// A bf16 buffer of n elements widened into the f32 `out`, or added to it under accumulate.
void widen_into(const Stream& stream, cudaStream_t native_stream, const void* bf16_src, float* out, std::int64_t n,
                bool accumulate) {
  if (!accumulate) {
    detail::launch_convert(bf16_src, detail::CudaElement::bf16, out, detail::CudaElement::f32, n, native_stream);
    return;
  }
  detail::CudaScratch wide(stream, static_cast<std::size_t>(n) * sizeof(float));
  detail::launch_convert(bf16_src, detail::CudaElement::bf16, wide.data(), detail::CudaElement::f32, n,
                         native_stream);
  launch_add_scaled<float>(native_stream, n, 1.0f, wide.as<float>(), out);
}

// The graphs declare every tensor 16-byte aligned (as cudnn-frontend does): a view at another offset
// (a ring block, a head slice) runs the own kernel instead of failing in cudnnBackendExecute.
bool aligned(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

std::unique_ptr<detail::CudaScratch> workspace_for(const Stream& stream, const Plan& plan) {
  if (plan.workspace <= 0) return nullptr;
  return std::make_unique<detail::CudaScratch>(stream, static_cast<std::size_t>(plan.workspace));
}

}  // namespace

bool cudnn_attention_forward(const Stream& stream, const AttentionShape& shape, const void* q, const void* k,
                             const void* v, float* o, float* lse) {
  WF_CHECK(cudnn_attention_supported(shape, DType::bf16), "cudnn_attention_forward: {}",
           cudnn_attention_refusal(shape, DType::bf16));
  if (!aligned({q, k, v, lse})) return false;
  const CudnnPlanKey key = cudnn_plan_key(stream.device().index, shape, false);
  Handle& h = handle_for(stream.device());
  const std::shared_ptr<const Plan> plan = plan_for(key, h);
  if (!plan) return false;
  const cudaStream_t native_stream = native(stream);
  const std::int64_t o_elements = shape.batch * shape.q_len * shape.heads * shape.head_dim;
  detail::CudaScratch o_bf16(stream, static_cast<std::size_t>(o_elements) * 2);
  const std::unique_ptr<detail::CudaScratch> workspace = workspace_for(stream, *plan);
  float scale = static_cast<float>(attention_scale(shape));
  float neg_inf = -std::numeric_limits<float>::infinity();
  std::int32_t s_kv = static_cast<std::int32_t>(shape.kv_len), s_q = static_cast<std::int32_t>(shape.q_len);
  std::vector<std::int64_t> uids{kQ, kK, kV, kO, kStats, kScale};
  std::vector<void*> pointers{const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), o_bf16.data(),
                              lse, &scale};
  if (key.mask != CudnnMask::none) {
    uids.push_back(kNegInf);
    pointers.push_back(&neg_inf);
  }
  if (key.mask == CudnnMask::bottom_right) {
    uids.insert(uids.end(), {kSkv, kSq});
    pointers.insert(pointers.end(), {&s_kv, &s_q});
  }
  execute(h, *plan, native_stream, uids, pointers, workspace ? workspace->data() : nullptr);
  widen_into(stream, native_stream, o_bf16.data(), o, o_elements, false);
  return true;
}

bool cudnn_attention_backward(const Stream& stream, const AttentionShape& shape, const void* q, const void* k,
                              const void* v, const float* o, const float* lse, const void* d_o, float* dq, float* dk,
                              float* dv, bool accumulate) {
  WF_CHECK(cudnn_attention_supported(shape, DType::bf16), "cudnn_attention_backward: {}",
           cudnn_attention_refusal(shape, DType::bf16));
  if (!aligned({q, k, v, lse, d_o})) return false;
  const CudnnPlanKey key = cudnn_plan_key(stream.device().index, shape, true);
  Handle& h = handle_for(stream.device());
  const std::shared_ptr<const Plan> plan = plan_for(key, h);
  if (!plan) return false;
  const cudaStream_t native_stream = native(stream);
  const std::int64_t q_elements = shape.batch * shape.q_len * shape.heads * shape.head_dim;
  const std::int64_t kv_elements = shape.batch * shape.kv_len * shape.kv_heads * shape.head_dim;
  const std::int64_t rows = shape.batch * shape.heads * shape.q_len;
  // cuDNN reads O in the operands' type (for D = rowsum(dO∘O)) and writes bf16 gradients.
  detail::CudaScratch o_bf16(stream, static_cast<std::size_t>(q_elements) * 2);
  detail::launch_convert(o, detail::CudaElement::f32, o_bf16.data(), detail::CudaElement::bf16, q_elements,
                         native_stream);
  detail::CudaScratch dq_bf16(stream, static_cast<std::size_t>(q_elements) * 2);
  detail::CudaScratch dk_bf16(stream, static_cast<std::size_t>(kv_elements) * 2);
  detail::CudaScratch dv_bf16(stream, static_cast<std::size_t>(kv_elements) * 2);
  const std::unique_ptr<detail::CudaScratch> workspace = workspace_for(stream, *plan);
  float scale = static_cast<float>(attention_scale(shape));
  float neg_inf = -std::numeric_limits<float>::infinity(), one = 1.0f;
  std::int32_t s_kv = static_cast<std::int32_t>(shape.kv_len), s_q = static_cast<std::int32_t>(shape.q_len);
  std::vector<std::int64_t> uids{kQ, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kScale};
  std::vector<void*> pointers{const_cast<void*>(q),   const_cast<void*>(k),     const_cast<void*>(v),
                              o_bf16.data(),          const_cast<float*>(lse),  const_cast<void*>(d_o),
                              dq_bf16.data(),         dk_bf16.data(),           dv_bf16.data(),
                              &scale};
  std::unique_ptr<detail::CudaScratch> softmax_sum, dq_accum;
  if (plan->f32_scratch) {
    softmax_sum = std::make_unique<detail::CudaScratch>(stream, static_cast<std::size_t>(rows) * sizeof(float));
    dq_accum = std::make_unique<detail::CudaScratch>(stream, static_cast<std::size_t>(q_elements) * sizeof(float));
    // cuDNN 9.6 and later initialise dQ_accum themselves (cudnn-frontend stopped clearing it); cleared
    // anyway, as before 9.6, since a stale accumulator would be a silent wrong gradient.
    WF_CUDA_CHECK(cudaMemsetAsync(dq_accum->data(), 0, dq_accum->nbytes(), native_stream));
    uids.insert(uids.end(), {kOne, kSoftmaxSum, kDQAccum});
    pointers.insert(pointers.end(), {&one, softmax_sum->data(), dq_accum->data()});
  }
  if (key.mask != CudnnMask::none) {
    uids.push_back(kNegInf);
    pointers.push_back(&neg_inf);
  }
  if (key.mask == CudnnMask::bottom_right) {
    uids.insert(uids.end(), {kSkv, kSq});
    pointers.insert(pointers.end(), {&s_kv, &s_q});
  }
  execute(h, *plan, native_stream, uids, pointers, workspace ? workspace->data() : nullptr);
  widen_into(stream, native_stream, dq_bf16.data(), dq, q_elements, accumulate);
  widen_into(stream, native_stream, dk_bf16.data(), dk, kv_elements, accumulate);
  widen_into(stream, native_stream, dv_bf16.data(), dv, kv_elements, accumulate);
  return true;
}

std::string cudnn_plan_kind(const CudnnPlanKey& key) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  const auto it = c.plans.find(key);
  return it == c.plans.end() || !it->second ? "" : it->second->kind;
}

std::string cudnn_version_text() {
  const std::size_t v = cudnnGetVersion();  // major·10000 + minor·100 + patch since cuDNN 9
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

#endif  // WF_HAVE_CUDNN

}  // namespace wf::kernels::cuda
