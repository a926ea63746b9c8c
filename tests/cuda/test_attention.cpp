// CUDA attention (kernels/cuda/attention.cpp) against the CPU entries on the same fresh random
// inputs: the forward's o and lse, the backward's dq, dk, dv (with and without a gradient at lse,
// written and accumulated), with and without packed documents inside the call
// (AttentionShape::windows), the lse merge and sequence-parallel attention's pieces.
//
// Tolerances (|gpu − cpu| <= rtol·|cpu| + rtol·max(max|cpu|, 1) over the whole output): the two
// backends sum in different orders (tiles of 32 keys here, 128/256 on the CPU), so elements near
// zero are judged against the output's scale (or the inputs', 1, where the output is 0 up to
// rounding: with one visible key dq and dk vanish).
//   f32: 1e-5 for o and lse; 3e-5 for the gradients, sums of up to q_len·group terms of
//        dP − D, whose cancellation costs a few more ulps of the largest term.
//   f64: 1e-12.
//   bf16 operands (vs the CPU's bf16 entry, which also rounds P and dS to bf16 before their
//        products): 2e-2, on tensor cores (forward and backward, head_dim a multiple of 16 up to
//        128) as on the SIMT kernels; a P or dS that the two round to neighbouring bf16 values
//        (the f32 values differ in their last bits) moves a product by one bf16 ulp, 2^-8
//        relative.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention_choice.h"
#include "kernels/cuda/sm90/attention.h"
#include "src/core/cuda/cuda_device.h"
#include "src/ops/document_attention.h"
#include "tests/cuda/cuda_test_util.h"

namespace {

using namespace wf;
using namespace wf::cuda_test;
using kernels::AttentionShape;

constexpr double kInf = std::numeric_limits<double>::infinity();

DType result_dtype(DType operands) { return operands == DType::bf16 ? DType::f32 : operands; }

double forward_tolerance(DType operands) {
  return operands == DType::f64 ? 1e-12 : operands == DType::f32 ? 1e-5 : 2e-2;
}
double gradient_tolerance(DType operands) {
  return operands == DType::f64 ? 1e-12 : operands == DType::f32 ? 3e-5 : 2e-2;
}

// The largest finite |x|.
double max_abs(const Tensor& x) {
  const Tensor c = x.to(Device::cpu()).to(DType::f64);
  double m = 0;
  for (std::int64_t i = 0; i < c.numel(); ++i)
    if (std::isfinite(c.data<double>()[i])) m = std::max(m, std::abs(c.data<double>()[i]));
  return m;
}

// Elements are judged against the output's scale, or 1 (the inputs' scale) where the output is all
// rounding noise (one visible key: dq and dk are 0 up to rounding).
void require_near(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  require_close(got, want, tol, tol * std::max(max_abs(want), 1.0), what);
}

std::string describe(const AttentionShape& s, DType operands) {
  return std::string(dtype_name(operands)) + " batch " + std::to_string(s.batch) + " q_len " +
         std::to_string(s.q_len) + " kv_len " + std::to_string(s.kv_len) + " heads " + std::to_string(s.heads) +
         "/" + std::to_string(s.kv_heads) + " head_dim " + std::to_string(s.head_dim) +
         (s.causal ? " causal" : " full") + " offsets " + std::to_string(s.q_offset) + "/" +
         std::to_string(s.kv_offset) +
         (s.windows.ranges != nullptr ? " key windows: " + std::to_string(s.windows.lists) + " lists"
                                      : std::string());
}

Shape q_shape(const AttentionShape& s) { return {s.batch, s.q_len, s.heads, s.head_dim}; }
Shape kv_shape(const AttentionShape& s) { return {s.batch, s.kv_len, s.kv_heads, s.head_dim}; }
Shape lse_shape(const AttentionShape& s) { return {s.batch, s.heads, s.q_len}; }

struct Inputs {
  Tensor q, k, v, d_o, d_lse;  // on the CPU; d_lse in the result dtype
};

Inputs random_inputs(const AttentionShape& s, DType operands, std::uint64_t seed) {
  return {random_normal(q_shape(s), seed + 1, operands), random_normal(kv_shape(s), seed + 2, operands),
          random_normal(kv_shape(s), seed + 3, operands), random_normal(q_shape(s), seed + 4, operands),
          random_normal(lse_shape(s), seed + 5, result_dtype(operands))};
}

struct Forward {
  Tensor o, lse;
};

Forward run_forward(kernels::Backend& backend, const Stream& stream, Device device, const AttentionShape& s,
                    DType operands, const Inputs& in) {
  const DType out = result_dtype(operands);
  const Tensor q = in.q.to(device), k = in.k.to(device), v = in.v.to(device);
  Forward f{Tensor::empty(q_shape(s), out, device), Tensor::empty(lse_shape(s), out, device)};
  backend.attention_forward(stream, operands, s, q.raw_data(), k.raw_data(), v.raw_data(), f.o.raw_data(),
                            f.lse.raw_data());
  stream.synchronize();
  return {f.o.to(Device::cpu()), f.lse.to(Device::cpu())};
}

struct Gradients {
  Tensor dq, dk, dv;
};

// The backward from the CPU forward's o and lse (the same for both backends), into gradients that
// start as `start` (accumulate) or as garbage the entry must overwrite.
Gradients run_backward(kernels::Backend& backend, const Stream& stream, Device device, const AttentionShape& s,
                       DType operands, const Inputs& in, const Forward& f, bool accumulate, bool with_d_lse,
                       const Gradients& start) {
  const Tensor q = in.q.to(device), k = in.k.to(device), v = in.v.to(device), d_o = in.d_o.to(device);
  const Tensor o = f.o.to(device), lse = f.lse.to(device), d_lse = in.d_lse.to(device);
  // Copies (.to(Device::cpu()) on the CPU would share `start`'s storage).
  Gradients g{start.dq.clone().to(device), start.dk.clone().to(device), start.dv.clone().to(device)};
  backend.attention_backward(stream, operands, s, q.raw_data(), k.raw_data(), v.raw_data(), o.raw_data(),
                             lse.raw_data(), d_o.raw_data(), g.dq.raw_data(), g.dk.raw_data(), g.dv.raw_data(),
                             accumulate, with_d_lse ? d_lse.raw_data() : nullptr);
  stream.synchronize();
  return {g.dq.to(Device::cpu()), g.dk.to(Device::cpu()), g.dv.to(Device::cpu())};
}

// Forward, then the backward in all four combinations of accumulate and d_lse: GPU vs CPU.
void check_attention(const AttentionShape& s, DType operands, std::uint64_t salt) {
  const std::string what = describe(s, operands);
  INFO(what);
  const Inputs in = random_inputs(s, operands, fresh_seed(salt));
  const Forward want = run_forward(cpu_kernels(), cpu_stream(), Device::cpu(), s, operands, in);
  const Forward got = run_forward(gpu_kernels(), gpu_stream(), gpu(), s, operands, in);
  require_near(got.o, want.o, forward_tolerance(operands), what + ": o");
  require_near(got.lse, want.lse, forward_tolerance(operands), what + ": lse");

  const DType out = result_dtype(operands);
  const Gradients random_start{random_normal(q_shape(s), fresh_seed(salt) + 6, out),
                               random_normal(kv_shape(s), fresh_seed(salt) + 7, out),
                               random_normal(kv_shape(s), fresh_seed(salt) + 8, out)};
  // Garbage the overwriting entry must not read: large, so that a stray add shows.
  const Gradients garbage{Tensor::full(q_shape(s), 1e6, out), Tensor::full(kv_shape(s), 1e6, out),
                          Tensor::full(kv_shape(s), 1e6, out)};
  for (const bool accumulate : {false, true}) {
    for (const bool with_d_lse : {false, true}) {
      const std::string how = what + (accumulate ? ", accumulated" : ", written") + (with_d_lse ? ", d_lse" : "");
      const Gradients& start = accumulate ? random_start : garbage;
      const Gradients w =
          run_backward(cpu_kernels(), cpu_stream(), Device::cpu(), s, operands, in, want, accumulate, with_d_lse,
                       start);
      const Gradients g =
          run_backward(gpu_kernels(), gpu_stream(), gpu(), s, operands, in, want, accumulate, with_d_lse, start);
      require_near(g.dq, w.dq, gradient_tolerance(operands), how + ": dq");
      require_near(g.dk, w.dk, gradient_tolerance(operands), how + ": dk");
      require_near(g.dv, w.dv, gradient_tolerance(operands), how + ": dv");
    }
  }
}

AttentionShape shape(std::int64_t batch, std::int64_t q_len, std::int64_t kv_len, std::int64_t heads,
                     std::int64_t kv_heads, std::int64_t head_dim, bool causal, std::int64_t q_offset = 0,
                     std::int64_t kv_offset = 0, double scale = 0) {
  AttentionShape s;
  s.batch = batch;
  s.q_len = q_len;
  s.kv_len = kv_len;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.causal = causal;
  s.q_offset = q_offset;
  s.kv_offset = kv_offset;
  s.scale = scale;
  return s;
}

// Shapes every operand type runs: masks, ring blocks, GQA, head widths and lengths with tails.
std::vector<AttentionShape> shapes() {
  return {
      shape(2, 17, 17, 4, 4, 16, true),            // causal, one partial tile
      shape(1, 64, 64, 4, 1, 64, true),            // GQA 4:1
      shape(2, 200, 200, 4, 2, 80, false),         // full, GQA 2:1, head_dim not a power of two
      shape(1, 1, 1, 2, 2, 128, true),             // one token
      shape(1, 1000, 1000, 2, 1, 64, true),        // long causal
      shape(1, 64, 200, 4, 2, 32, true, 200, 0),   // ring block from the past: nothing masked
      shape(1, 200, 200, 2, 2, 64, true, 400, 400),  // ring diagonal block
      shape(1, 17, 64, 2, 1, 16, true, 0, 10),     // block partly in the future: rows 0..9 see nothing
      shape(1, 17, 0, 2, 2, 16, false),            // no keys: o = 0, lse = −inf
      shape(1, 0, 17, 2, 2, 16, false),            // no queries: zero dk, dv
      shape(2, 33, 257, 4, 2, 128, false),         // q_len != kv_len
      shape(1, 31, 31, 3, 3, 24, true, 0, 0, 0.3),  // head_dim not a multiple of 16, explicit scale
      shape(1, 33, 40, 2, 1, 256, true),           // the widest head
      shape(2, 65, 97, 6, 2, 96, true, 32, 0),     // one row past a WMMA tile (64), one key past 3 (32), GQA 3:1
  };
}

}  // namespace

TEST_CASE("cuda attention: f32 forward and backward match the CPU", "[cuda][attention]") {
  std::uint64_t salt = 100;
  for (const AttentionShape& s : shapes()) check_attention(s, DType::f32, ++salt);
}

TEST_CASE("cuda attention: f64 forward and backward match the CPU", "[cuda][attention]") {
  std::uint64_t salt = 200;
  for (const AttentionShape& s : shapes()) check_attention(s, DType::f64, ++salt);
}

TEST_CASE("cuda attention: bf16 operands (tensor cores where head_dim % 16 == 0, up to 128) match the CPU's bf16 "
          "kernel",
          "[cuda][attention]") {
  std::uint64_t salt = 300;
  for (const AttentionShape& s : shapes()) check_attention(s, DType::bf16, ++salt);
}

namespace {

// ---- packed documents inside one call -----------------------------------------------------------
// How a list's documents are drawn over the call's global positions [0, end).
enum class Packing {
  random,  // lengths mixed: one-token documents, short ones, and ones spanning several tiles
  whole,   // one document spanning the whole call (the plain mask's results)
  tokens,  // every position its own document (each query sees at most itself)
};

// A shape with packed documents as the kernels read them (kernels/kernel_args.h): the key windows
// their boundaries give (ops::KeyWindows), one list per batch row or one shared by every row.
struct PackedShape {
  AttentionShape base;
  std::shared_ptr<const wf::ops::KeyWindows> windows;

  AttentionShape get() const { return windows->applied_to(base); }  // valid while this object is
};

std::vector<std::int64_t> document_bounds(Packing packing, std::int64_t end, std::mt19937_64& rng) {
  std::vector<std::int64_t> list{0};
  if (packing == Packing::whole) {
    list.push_back(end);
    return list;
  }
  while (list.back() < end) {
    std::int64_t length = 1;
    if (packing == Packing::random) {
      const std::uint64_t kind = rng() % 5;  // 1 in 5 one token, 2 in 5 short, 2 in 5 long
      length = kind == 0 ? 1 : kind <= 2 ? 2 + std::int64_t(rng() % 8) : 20 + std::int64_t(rng() % 150);
    }
    list.push_back(list.back() + length);  // the last document may run past the call's end
  }
  return list;
}

PackedShape packed(const AttentionShape& base, Packing packing, bool per_row, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t end = std::max(base.q_offset + base.q_len, base.kv_offset + base.kv_len);
  std::vector<std::vector<std::int64_t>> lists;
  for (std::int64_t r = 0; r < (per_row ? base.batch : 1); ++r) lists.push_back(document_bounds(packing, end, rng));
  return {base, std::make_shared<const wf::ops::KeyWindows>(wf::ops::position_range(base.q_offset, base.q_len),
                                                            wf::ops::position_range(base.kv_offset, base.kv_len),
                                                            lists, base.causal)};
}

// Packed shapes every operand type runs: per-row lists and one shared list, causal and full, ring
// blocks (from the past, on the diagonal, partly in the future, a full-mask block), GQA, head
// widths on and off the tensor cores' multiple of 16, and lengths with tails of every tile.
std::vector<PackedShape> packed_shapes(std::uint64_t seed) {
  return {
      packed(shape(2, 200, 200, 4, 2, 64, true), Packing::random, true, seed + 1),   // per-row lists, GQA 2:1
      packed(shape(2, 200, 200, 4, 4, 64, false), Packing::random, false, seed + 2),  // full, shared list
      packed(shape(3, 97, 97, 2, 1, 80, true), Packing::random, true, seed + 3),     // head_dim 80, GQA 2:1
      packed(shape(2, 130, 130, 2, 2, 32, true), Packing::whole, false, seed + 4),   // one document: causal
      packed(shape(1, 70, 70, 2, 2, 16, false), Packing::tokens, false, seed + 5),   // one-token documents
      packed(shape(1, 70, 70, 2, 1, 16, true), Packing::tokens, false, seed + 6),
      packed(shape(2, 64, 128, 4, 2, 32, true, 128, 0), Packing::random, true, seed + 7),  // ring block, past
      packed(shape(1, 100, 100, 2, 1, 64, true, 300, 300), Packing::random, false, seed + 8),  // ring diagonal
      packed(shape(2, 65, 97, 6, 2, 96, true, 32, 64), Packing::random, true, seed + 9),  // partly in the future
      packed(shape(2, 64, 96, 2, 2, 48, false, 96, 0), Packing::random, true, seed + 10),  // full ring block
      packed(shape(1, 33, 257, 4, 2, 128, false), Packing::random, false, seed + 11),  // q_len != kv_len
      packed(shape(1, 40, 40, 2, 2, 24, true, 0, 0, 0.3), Packing::random, false, seed + 12),  // explicit scale
      packed(shape(1, 17, 0, 2, 2, 16, false), Packing::random, false, seed + 13),  // no keys
  };
}

}  // namespace

TEST_CASE("cuda attention: packed documents (f32) match the CPU", "[cuda][attention][documents]") {
  std::uint64_t salt = 800;
  for (const PackedShape& p : packed_shapes(fresh_seed(799))) check_attention(p.get(), DType::f32, ++salt);
}

TEST_CASE("cuda attention: packed documents (f64) match the CPU", "[cuda][attention][documents]") {
  std::uint64_t salt = 900;
  for (const PackedShape& p : packed_shapes(fresh_seed(899))) check_attention(p.get(), DType::f64, ++salt);
}

TEST_CASE("cuda attention: packed documents with bf16 operands match the CPU's bf16 kernel",
          "[cuda][attention][documents]") {
  std::uint64_t salt = 1000;
  for (const PackedShape& p : packed_shapes(fresh_seed(999))) check_attention(p.get(), DType::bf16, ++salt);
}

TEST_CASE("cuda attention: bf16 on tensor cores at the tails of its 64-row and 32-key tiles match the CPU's bf16 "
          "kernel",
          "[cuda][attention][documents]") {
  // The WMMA kernels' tiles: 64 query rows (16 per warp), 32 keys; head_dim 16 and 128 bound them.
  const std::vector<PackedShape> cases = {
      packed(shape(1, 129, 33, 2, 1, 128, false), Packing::whole, false, fresh_seed(1200)),  // 2 rows, 1 key past
      packed(shape(2, 64, 32, 4, 4, 16, true, 32, 0), Packing::whole, false, fresh_seed(1201)),  // whole tiles
      packed(shape(1, 1, 31, 2, 2, 48, false), Packing::whole, false, fresh_seed(1202)),  // one row
      packed(shape(2, 130, 130, 3, 1, 112, true), Packing::random, true, fresh_seed(1203)),  // documents, GQA 3:1
      packed(shape(1, 96, 160, 2, 2, 64, false, 64, 0), Packing::random, false, fresh_seed(1204)),  // full ring block
  };
  std::uint64_t salt = 1210;
  for (const PackedShape& p : cases) check_attention(p.get(), DType::bf16, ++salt);
}

namespace {

// ---- the sm_90 kernels, called directly (kernels/cuda/sm90/attention.h) --------------------------
// Their launchers take the shape as the entries hand it on: the scale resolved, the windows in
// device memory (held by the returned object). They run only on compute capability 9.0 with a build
// that has them; elsewhere the cases say why and check nothing.
struct Sm90Shape {
  AttentionShape s;
  Tensor windows;  // the key ranges as i64 pairs on the GPU
};
Sm90Shape sm90_shape(const AttentionShape& shape) {
  Sm90Shape out{shape, Tensor()};
  out.s.scale = kernels::attention_scale(shape);
  if (shape.windows.ranges != nullptr) {
    const std::int64_t n = shape.windows.lists * shape.q_len;
    Tensor host = Tensor::empty({std::max<std::int64_t>(n, 1), 2}, DType::i64, Device::cpu());
    std::copy_n(reinterpret_cast<const std::int64_t*>(shape.windows.ranges), 2 * n, host.data<std::int64_t>());
    out.windows = host.to(gpu());
    out.s.windows.ranges = static_cast<const kernels::KeyRange*>(out.windows.raw_data());
  }
  return out;
}
const __nv_bfloat16* bf16_on_gpu(const Tensor& t) { return static_cast<const __nv_bfloat16*>(t.raw_data()); }

Forward run_sm90_forward(const AttentionShape& shape, const Inputs& in) {
  const Sm90Shape shaped = sm90_shape(shape);
  const AttentionShape& s = shaped.s;
  const Tensor q = in.q.to(gpu()), k = in.k.to(gpu()), v = in.v.to(gpu());
  Forward f{Tensor::full(q_shape(s), 7.0, DType::f32, gpu()), Tensor::full(lse_shape(s), 7.0, DType::f32, gpu())};
  kernels::cuda::launch_attention_forward_sm90(wf::detail::cuda_stream(gpu_stream()), s, bf16_on_gpu(q),
                                               bf16_on_gpu(k), bf16_on_gpu(v), f.o.data<float>(),
                                               f.lse.data<float>());
  gpu_stream().synchronize();
  return {f.o.to(Device::cpu()), f.lse.to(Device::cpu())};
}

Gradients run_sm90_backward(const AttentionShape& shape, const Inputs& in, const Forward& f, bool accumulate,
                            bool with_d_lse, const Gradients& start) {
  const Sm90Shape shaped = sm90_shape(shape);
  const AttentionShape& s = shaped.s;
  const Tensor q = in.q.to(gpu()), k = in.k.to(gpu()), v = in.v.to(gpu()), d_o = in.d_o.to(gpu());
  const Tensor o = f.o.to(gpu()), lse = f.lse.to(gpu()), d_lse = in.d_lse.to(gpu());
  Tensor minus_delta = Tensor::empty({std::max<std::int64_t>(s.batch * s.heads * s.q_len, 1)}, DType::f32, gpu());
  Gradients g{start.dq.clone().to(gpu()), start.dk.clone().to(gpu()), start.dv.clone().to(gpu())};
  kernels::cuda::launch_attention_backward_sm90(
      wf::detail::cuda_stream(gpu_stream()), s, bf16_on_gpu(q), bf16_on_gpu(k), bf16_on_gpu(v), o.data<float>(),
      lse.data<float>(), bf16_on_gpu(d_o), g.dq.data<float>(), g.dk.data<float>(), g.dv.data<float>(), accumulate,
      with_d_lse ? d_lse.data<float>() : nullptr, minus_delta.data<float>());
  gpu_stream().synchronize();
  return {g.dq.to(Device::cpu()), g.dk.to(Device::cpu()), g.dv.to(Device::cpu())};
}

// Why the sm_90 kernels do not run on this GPU for a plain shape ("" when they do).
std::string sm90_refusal_here() {
  const Tensor probe = Tensor::zeros({16}, DType::bf16, gpu());
  return kernels::cuda::sm90_attention_refusal(gpu().index, shape(1, 64, 64, 1, 1, 64, true), probe.raw_data(),
                                               probe.raw_data(), probe.raw_data());
}

}  // namespace

TEST_CASE("cuda attention: the sm_90 kernels match the CPU's bf16 kernel, forward and backward: masks, ring "
          "blocks, GQA, packed documents, tails of their 64-row and 64-key tiles",
          "[cuda][attention][sm90]") {
  if (const std::string why = sm90_refusal_here(); !why.empty()) {
    WARN("the sm_90 kernels do not run here, nothing checked: " << why);
    return;
  }
  std::vector<PackedShape> packed_cases = {
      packed(shape(2, 200, 200, 4, 2, 64, true), Packing::random, true, fresh_seed(1500)),    // per-row lists
      packed(shape(1, 130, 130, 2, 1, 128, true), Packing::tokens, false, fresh_seed(1501)),  // one-token documents
      packed(shape(2, 65, 97, 6, 2, 128, true, 32, 64), Packing::random, true, fresh_seed(1502)),  // partly future
      packed(shape(1, 96, 160, 2, 2, 64, false, 64, 0), Packing::random, false, fresh_seed(1503)),  // full ring block
  };
  std::vector<AttentionShape> cases = {
      shape(1, 64, 64, 4, 1, 64, true),               // one tile, GQA 4:1
      shape(2, 200, 200, 4, 2, 128, false),           // full, tails of both tiles
      shape(1, 1000, 1000, 2, 1, 64, true),           // long causal
      shape(1, 64, 200, 4, 2, 64, true, 200, 0),      // ring block from the past
      shape(1, 200, 200, 2, 2, 128, true, 400, 400),  // ring diagonal block
      shape(1, 17, 64, 2, 1, 64, true, 0, 10),        // rows 0..9 see nothing: o = 0, lse = -inf, no gradient
      shape(1, 17, 0, 2, 2, 128, false),              // no keys
      shape(1, 0, 17, 2, 2, 64, false),               // no queries: zero dk, dv
      shape(2, 33, 257, 4, 2, 128, false),            // q_len != kv_len
      shape(1, 31, 31, 3, 3, 64, true, 0, 0, 0.3),    // explicit scale
      shape(2, 65, 129, 6, 2, 128, true, 64, 0),      // one row past a tile, one key past two, GQA 3:1
  };
  for (const PackedShape& p : packed_cases) cases.push_back(p.get());
  std::uint64_t salt = 1510;
  for (const AttentionShape& s : cases) {
    const std::string what = describe(s, DType::bf16) + " (sm_90 kernels)";
    INFO(what);
    const Inputs in = random_inputs(s, DType::bf16, fresh_seed(++salt));
    const Forward want = run_forward(cpu_kernels(), cpu_stream(), Device::cpu(), s, DType::bf16, in);
    const Forward got = run_sm90_forward(s, in);
    require_near(got.o, want.o, forward_tolerance(DType::bf16), what + ": o");
    require_near(got.lse, want.lse, forward_tolerance(DType::bf16), what + ": lse");

    const Gradients random_start{random_normal(q_shape(s), fresh_seed(salt) + 6, DType::f32),
                                 random_normal(kv_shape(s), fresh_seed(salt) + 7, DType::f32),
                                 random_normal(kv_shape(s), fresh_seed(salt) + 8, DType::f32)};
    // Garbage the overwriting launch must not read: large, so that a stray add shows.
    const Gradients garbage{Tensor::full(q_shape(s), 1e6, DType::f32), Tensor::full(kv_shape(s), 1e6, DType::f32),
                            Tensor::full(kv_shape(s), 1e6, DType::f32)};
    for (const bool accumulate : {false, true}) {
      for (const bool with_d_lse : {false, true}) {
        const std::string how = what + (accumulate ? ", accumulated" : ", written") + (with_d_lse ? ", d_lse" : "");
        const Gradients& start = accumulate ? random_start : garbage;
        const Gradients w = run_backward(cpu_kernels(), cpu_stream(), Device::cpu(), s, DType::bf16, in, want,
                                         accumulate, with_d_lse, start);
        const Gradients g = run_sm90_backward(s, in, want, accumulate, with_d_lse, start);
        require_near(g.dq, w.dq, gradient_tolerance(DType::bf16), how + ": dq");
        require_near(g.dk, w.dk, gradient_tolerance(DType::bf16), how + ": dk");
        require_near(g.dv, w.dv, gradient_tolerance(DType::bf16), how + ": dv");
      }
    }
  }
}

TEST_CASE("cuda attention: the per-shape choice measures the sm_90 kernels on packed documents, which cuDNN "
          "refuses, and keeps the CPU's results",
          "[cuda][attention][sm90]") {
  if (kernels::cuda::attention_backend_setting() != kernels::cuda::AttentionBackendSetting::automatic) {
    WARN("WF_ATTENTION_BACKEND is not auto: the choice is not measured, nothing checked");
    return;
  }
  // A shape no other case uses, so that its first call here is its first use in the process.
  const PackedShape p = packed(shape(1, 192, 192, 2, 1, 64, true), Packing::random, false, fresh_seed(1600));
  const AttentionShape s = p.get();
  const Inputs in = random_inputs(s, DType::bf16, fresh_seed(1601));
  const Forward want = run_forward(cpu_kernels(), cpu_stream(), Device::cpu(), s, DType::bf16, in);
  const Gradients zeros{Tensor::zeros(q_shape(s), DType::f32), Tensor::zeros(kv_shape(s), DType::f32),
                        Tensor::zeros(kv_shape(s), DType::f32)};
  const Gradients want_g =
      run_backward(cpu_kernels(), cpu_stream(), Device::cpu(), s, DType::bf16, in, want, false, false, zeros);
  for (int call = 0; call < 2; ++call) {  // the first measures, the second runs the choice
    INFO("call " << call);
    const Forward got = run_forward(gpu_kernels(), gpu_stream(), gpu(), s, DType::bf16, in);
    require_near(got.o, want.o, forward_tolerance(DType::bf16), "o");
    require_near(got.lse, want.lse, forward_tolerance(DType::bf16), "lse");
    const Gradients g = run_backward(gpu_kernels(), gpu_stream(), gpu(), s, DType::bf16, in, want, false, false, zeros);
    require_near(g.dq, want_g.dq, gradient_tolerance(DType::bf16), "dq");
    require_near(g.dk, want_g.dk, gradient_tolerance(DType::bf16), "dk");
    require_near(g.dv, want_g.dv, gradient_tolerance(DType::bf16), "dv");
  }
  // Where the sm_90 kernels are off (WF_ATTENTION_SM90 unset: the device check's second test_cuda
  // process sets it) they are no candidate, like on a GPU that is not sm_90.
  const bool sm90_runs = sm90_refusal_here().empty() && kernels::cuda::sm90_attention_enabled();
  int entries = 0;
  for (const auto& choice : kernels::cuda::attention_choices()) {
    if (choice.shape.find("q_len 192 kv_len 192 heads 2/1 head_dim 64") == std::string::npos) continue;
    ++entries;
    INFO(choice.shape << ": " << choice.which << " (" << choice.reason << ")");
    CHECK(choice.shape.find("key windows") != std::string::npos);
    CHECK(choice.own_ms > 0);
    CHECK(choice.cudnn_ms < 0);  // cuDNN takes no key windows
    CHECK((choice.which == "own" || choice.which == "sm90"));
    // Measured where they run; where they mismatched, the reason says so and this fails.
    if (sm90_runs) CHECK(choice.sm90_ms > 0);
  }
  // Without the sm_90 kernels nothing else takes the shape: the own kernel runs it, no choice is made.
  CHECK(entries == (sm90_runs ? 2 : 0));
}

TEST_CASE("cuda attention: the key windows may be freed as soon as the entry returns",
          "[cuda][attention][documents]") {
  const PackedShape p = packed(shape(2, 150, 150, 2, 2, 32, true), Packing::random, true, fresh_seed(1100));
  const AttentionShape s = p.get();
  const Inputs in = random_inputs(s, DType::f32, fresh_seed(1101));
  const Forward want = run_forward(cpu_kernels(), cpu_stream(), Device::cpu(), s, DType::f32, in);
  // The GPU's copy of the windows is queued on the stream: the host's may change before it runs.
  std::vector<wf::kernels::KeyRange> windows(s.windows.ranges, s.windows.ranges + s.windows.lists * s.q_len);
  AttentionShape transient = s;
  transient.windows.ranges = windows.data();
  const Tensor q = in.q.to(gpu()), k = in.k.to(gpu()), v = in.v.to(gpu());
  Tensor o = Tensor::empty(q_shape(s), DType::f32, gpu()), lse = Tensor::empty(lse_shape(s), DType::f32, gpu());
  gpu_kernels().attention_forward(gpu_stream(), DType::f32, transient, q.raw_data(), k.raw_data(), v.raw_data(),
                                  o.raw_data(), lse.raw_data());
  std::fill(windows.begin(), windows.end(), wf::kernels::KeyRange{-1, -1});
  windows = {};
  gpu_stream().synchronize();
  require_near(o, want.o, forward_tolerance(DType::f32), describe(s, DType::f32) + ": o");
  require_near(lse, want.lse, forward_tolerance(DType::f32), describe(s, DType::f32) + ": lse");
}

TEST_CASE("cuda attention: key windows that decrease are errors naming them", "[cuda][attention][documents]") {
  const AttentionShape base = shape(1, 8, 8, 1, 1, 16, true);
  Tensor q = Tensor::zeros(q_shape(base)).to(gpu());
  Tensor o = Tensor::zeros(q_shape(base)).to(gpu());
  Tensor lse = Tensor::zeros(lse_shape(base)).to(gpu());
  std::vector<wf::kernels::KeyRange> windows(8, {0, 4});
  windows[5] = {0, 3};
  AttentionShape s = base;
  s.windows = {windows.data(), 1};
  REQUIRE_THROWS_WITH(gpu_kernels().attention_forward(gpu_stream(), DType::f32, s, q.raw_data(), q.raw_data(),
                                                      q.raw_data(), o.raw_data(), lse.raw_data()),
                      Catch::Contains("key window 5 of list 0 is [0, 3) after [0, 4)"));
}

TEST_CASE("cuda attention: a row that sees no key gets o = 0 and lse = -inf exactly, and zero gradients",
          "[cuda][attention]") {
  for (const DType operands : {DType::f32, DType::f64, DType::bf16}) {
    const AttentionShape s = shape(1, 17, 64, 2, 1, 32, true, 0, 10);  // rows 0..9 see nothing
    const Inputs in = random_inputs(s, operands, fresh_seed(400));
    const Forward f = run_forward(gpu_kernels(), gpu_stream(), gpu(), s, operands, in);
    const Tensor o = f.o.to(DType::f64), lse = f.lse.to(DType::f64);
    const Gradients zero{Tensor::zeros(q_shape(s), result_dtype(operands)),
                         Tensor::zeros(kv_shape(s), result_dtype(operands)),
                         Tensor::zeros(kv_shape(s), result_dtype(operands))};
    const Gradients g = run_backward(gpu_kernels(), gpu_stream(), gpu(), s, operands, in, f, false, true, zero);
    const Tensor dq = g.dq.to(DType::f64);
    for (std::int64_t h = 0; h < s.heads; ++h) {
      for (std::int64_t i = 0; i < s.q_len; ++i) {
        const bool sees = i >= 10;
        INFO(dtype_name(operands) << " head " << h << " row " << i);
        REQUIRE((lse.data<double>()[h * s.q_len + i] == -kInf) == !sees);
        for (std::int64_t c = 0; c < s.head_dim; ++c) {
          const std::int64_t at = (i * s.heads + h) * s.head_dim + c;
          REQUIRE(std::isfinite(o.data<double>()[at]));
          if (!sees) REQUIRE(o.data<double>()[at] == 0.0);
          if (!sees) REQUIRE(dq.data<double>()[at] == 0.0);
        }
      }
    }
  }
}

TEST_CASE("cuda attention: head_dim above the kernels' limit is an error naming it", "[cuda][attention]") {
  const AttentionShape s = shape(1, 4, 4, 1, 1, 512, false);
  Tensor q = Tensor::zeros(q_shape(s)).to(gpu());
  Tensor o = Tensor::zeros(q_shape(s)).to(gpu());
  Tensor lse = Tensor::zeros(lse_shape(s)).to(gpu());
  REQUIRE_THROWS_WITH(gpu_kernels().attention_forward(gpu_stream(), DType::f32, s, q.raw_data(), q.raw_data(),
                                                      q.raw_data(), o.raw_data(), lse.raw_data()),
                      Catch::Contains("head_dim 512 exceeds the 256"));
}

namespace {

// lse of partial attention: random, with −inf in a pattern that covers every pairing of a running
// row and a partial (both finite, one −inf, both −inf) and gaps large enough to underflow exp.
Tensor partial_lse(const Shape& shape, std::uint64_t seed, DType dtype, int phase) {
  Tensor lse = random_normal(shape, seed, DType::f64);
  double* p = lse.data<double>();
  for (std::int64_t i = 0; i < lse.numel(); ++i) {
    p[i] *= 10;
    if ((i + phase) % 3 == 0) p[i] = -kInf;
    if (i % 7 == 0) p[i] += phase == 0 ? 200 : -200;
  }
  return lse.to(dtype);
}

}  // namespace

TEST_CASE("cuda attention_merge matches the CPU, -inf rows included", "[cuda][attention]") {
  for (const DType dtype : {DType::f32, DType::f64}) {
    const std::int64_t batch = 2, q_len = 37, heads = 3, head_dim = 40;
    const Shape o_shape{batch, q_len, heads, head_dim}, lse_shape{batch, heads, q_len};
    const Tensor o = random_normal(o_shape, fresh_seed(500), dtype);
    const Tensor o_i = random_normal(o_shape, fresh_seed(501), dtype);
    const Tensor lse = partial_lse(lse_shape, fresh_seed(502), dtype, 0);
    const Tensor lse_i = partial_lse(lse_shape, fresh_seed(503), dtype, 1);
    Tensor want_o = o.clone(), want_lse = lse.clone();
    cpu_kernels().attention_merge(cpu_stream(), dtype, batch, q_len, heads, head_dim, want_o.raw_data(),
                                  want_lse.raw_data(), o_i.raw_data(), lse_i.raw_data());
    cpu_stream().synchronize();
    Tensor got_o = o.to(gpu()), got_lse = lse.to(gpu());
    const Tensor g_o_i = o_i.to(gpu()), g_lse_i = lse_i.to(gpu());
    gpu_kernels().attention_merge(gpu_stream(), dtype, batch, q_len, heads, head_dim, got_o.raw_data(),
                                  got_lse.raw_data(), g_o_i.raw_data(), g_lse_i.raw_data());
    gpu_stream().synchronize();
    const double tol = forward_tolerance(dtype);
    require_near(got_o, want_o, tol, std::string(dtype_name(dtype)) + " merged o");
    require_near(got_lse, want_lse, tol, std::string(dtype_name(dtype)) + " merged lse");
  }
}

TEST_CASE("cuda team_lse_combine matches the CPU, rows no member saw included", "[cuda][attention]") {
  for (const DType dtype : {DType::f32, DType::f64}) {
    const int members = 3;
    const std::int64_t rows = 1001;
    Tensor all = random_normal({members, rows}, fresh_seed(600), DType::f64);
    double* p = all.data<double>();
    for (std::int64_t r = 0; r < rows; ++r)
      for (int c = 0; c < members; ++c) {
        p[c * rows + r] *= 10;
        if (r % 5 == 0 || (r % 3 == 0 && c == 1)) p[c * rows + r] = -kInf;  // no member; member 1 only
      }
    all = all.to(dtype);
    for (int member = 0; member < members; ++member) {
      Tensor want_star = Tensor::empty({rows}, dtype), want_weight = Tensor::empty({rows}, dtype);
      cpu_kernels().team_lse_combine(cpu_stream(), dtype, members, rows, member, all.raw_data(),
                                     want_star.raw_data(), want_weight.raw_data());
      cpu_stream().synchronize();
      const Tensor g_all = all.to(gpu());
      Tensor star = Tensor::empty({rows}, dtype, gpu()), weight = Tensor::empty({rows}, dtype, gpu());
      gpu_kernels().team_lse_combine(gpu_stream(), dtype, members, rows, member, g_all.raw_data(), star.raw_data(),
                                     weight.raw_data());
      gpu_stream().synchronize();
      const std::string what = std::string(dtype_name(dtype)) + " member " + std::to_string(member);
      require_near(star, want_star, forward_tolerance(dtype), what + ": lse_star");
      require_near(weight, want_weight, forward_tolerance(dtype), what + ": weight");
    }
  }
}

TEST_CASE("cuda scale_attention_rows and attention_minus_delta match the CPU", "[cuda][attention]") {
  for (const DType dtype : {DType::f32, DType::f64}) {
    const std::int64_t B = 2, n = 33, h = 3, d = 17;
    const std::string name = dtype_name(dtype);
    const Tensor o = random_normal({B, n, h, d}, fresh_seed(700), dtype);
    const Tensor weight = random_normal({B, h, n}, fresh_seed(701), dtype);
    Tensor want = o.clone();
    cpu_kernels().scale_attention_rows(cpu_stream(), dtype, B, n, h, d, want.raw_data(), weight.raw_data());
    cpu_stream().synchronize();
    Tensor got = o.to(gpu());
    const Tensor g_weight = weight.to(gpu());
    gpu_kernels().scale_attention_rows(gpu_stream(), dtype, B, n, h, d, got.raw_data(), g_weight.raw_data());
    gpu_stream().synchronize();
    require_near(got, want, forward_tolerance(dtype), name + " scaled rows");

    const Tensor d_o = random_normal({B, n, h, d}, fresh_seed(702), dtype);
    const Tensor d_lse = random_normal({B, h, n}, fresh_seed(703), dtype);
    const Tensor g_o = o.to(gpu()), g_d_o = d_o.to(gpu()), g_d_lse = d_lse.to(gpu());
    for (const bool with_d_lse : {false, true}) {
      Tensor want_md = Tensor::empty({B, h, n}, dtype);
      cpu_kernels().attention_minus_delta(cpu_stream(), dtype, B, n, h, d, d_o.raw_data(), o.raw_data(),
                                          with_d_lse ? d_lse.raw_data() : nullptr, want_md.raw_data());
      cpu_stream().synchronize();
      Tensor md = Tensor::empty({B, h, n}, dtype, gpu());
      gpu_kernels().attention_minus_delta(gpu_stream(), dtype, B, n, h, d, g_d_o.raw_data(), g_o.raw_data(),
                                          with_d_lse ? g_d_lse.raw_data() : nullptr, md.raw_data());
      gpu_stream().synchronize();
      require_near(md, want_md, forward_tolerance(dtype), name + (with_d_lse ? " −D with d_lse" : " −D"));
    }
  }
}
