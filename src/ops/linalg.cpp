// Matrix products on their device's GEMM kernels (kernels/backend.h). Transposes are never materialised: they are GEMM flags.
// Gradients of a weight shared over a batch (a 2-D b in matmul, W in linear) are summed over
// the batch by the GEMM itself, as one product with the batch folded into K, whenever the
// memory layout allows it. linear_gelu is linear and GPT-2's GELU as one node on one backend
// entry (linear_gelu_forward), linear_add linear and a residual's add (linear_add_forward); a
// backend may fuse either into the GEMM's epilogue.
#include "wallfacer/ops/linalg.h"

#include "src/ops/common.h"
#include "src/ops/gelu_values.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/reduction.h"

namespace wf {
namespace {

using autograd::Context;
using autograd::TensorList;

// Rows and columns of op(t) for the last two dims of t.
struct OpDims {
  std::int64_t rows, cols;
};
OpDims op_dims(const Tensor& t, bool transposed) {
  const std::int64_t r = t.size(-2), c = t.size(-1);
  return transposed ? OpDims{c, r} : OpDims{r, c};
}

Shape batch_shape_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

// One GEMM whatever the operands: f32 and f64 on gemm(), bf16 on gemm_bf16 (f32 result).
template <class T>
void gemm_into(const ops::Kernels& k, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const T* A,
               std::int64_t lda, const T* B, std::int64_t ldb, T beta, T* C, std::int64_t ldc) {
  k->gemm(k.stream, dtype_v<T>, ta, tb, M, N, K, 1.0, A, lda, B, ldb, double(beta), C, ldc);
}
void gemm_into(const ops::Kernels& k, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K,
               const bf16* A, std::int64_t lda, const bf16* B, std::int64_t ldb, float beta, float* C,
               std::int64_t ldc) {
  k->gemm_bf16(k.stream, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

// A batched product's shape: op(A) [M, K] times op(B) [K, N] over `batch` items, a stride of 0
// sharing that operand across the batch.
struct ProductGeometry {
  bool ta, tb;
  std::int64_t M, N, K, lda, ldb, stride_a, stride_b, batch;
  Shape batch_shape;
};

// The products of a batch from operands of type In into a new tensor of type Out (the same for
// f32 and f64, f32 for bf16), or their sum over the batch into one [M, N] matrix.
template <class In, class Out>
Tensor product(const ops::Kernels& k, const ProductGeometry& g, const In* A, const In* B, bool sum_batch) {
  if (!sum_batch) {
    Shape out_shape = g.batch_shape;
    out_shape.insert(out_shape.end(), {g.M, g.N});
    Tensor out = Tensor::empty(out_shape, dtype_v<Out>, k.device());
    Out* C = out.template data<Out>();
    if constexpr (std::is_same_v<In, Out>) {
      k->gemm_batched(k.stream, dtype_v<In>, g.ta, g.tb, g.batch, g.M, g.N, g.K, 1.0, A, g.lda, g.stride_a, B, g.ldb,
                      g.stride_b, 0.0, C, g.N, g.M * g.N);
    } else {
      for (std::int64_t i = 0; i < g.batch; ++i) {
        gemm_into(k, g.ta, g.tb, g.M, g.N, g.K, A + i * g.stride_a, g.lda, B + i * g.stride_b, g.ldb, Out(0),
                  C + i * g.M * g.N, g.N);
      }
    }
    return out;
  }
  // The GEMMs write every element of out (beta = 0 first), so it needs no zero fill: for the
  // tied LM head of GPT-2 that fill alone was 154 MB of memory traffic per step.
  if (g.batch == 0) return Tensor::zeros({g.M, g.N}, dtype_v<Out>, k.device());
  Tensor out = Tensor::empty({g.M, g.N}, dtype_v<Out>, k.device());
  Out* C = out.template data<Out>();
  if (g.ta && !g.tb && g.stride_a != 0 && g.stride_b != 0) {
    // Σ_i a_iᵀ·b_i = [a_1; …; a_B]ᵀ·[b_1; …; b_B]: stacking the batch along K is a view of the
    // contiguous storage, so the whole sum is one GEMM with K' = batch·K.
    gemm_into(k, true, false, g.M, g.N, g.batch * g.K, A, g.lda, B, g.ldb, Out(0), C, g.N);
  } else {
    for (std::int64_t i = 0; i < g.batch; ++i) {
      gemm_into(k, g.ta, g.tb, g.M, g.N, g.K, A + i * g.stride_a, g.lda, B + i * g.stride_b, g.ldb,
                Out(i == 0 ? 0 : 1), C, g.N);
    }
  }
  return out;
}

// op(a)·op(b) for operands of at least 2 dims. Dims before the last two are a batch; a 2-D
// operand is shared by every item of the other's batch. With sum_batch the per-item products
// are summed into one [M, N] matrix (the gradient of a shared operand).
Tensor batched_product(const char* name, const Tensor& a, bool ta, const Tensor& b, bool tb, bool sum_batch) {
  const OpDims da = op_dims(a, ta), db = op_dims(b, tb);
  const std::int64_t M = da.rows, K = da.cols, N = db.cols;
  WF_CHECK(K == db.rows,
           "{}: inner dimensions differ: a of shape {}{} has {} columns but b of shape {}{} has {} rows", name,
           shape_str(a.shape()), ta ? " (transposed)" : "", K, shape_str(b.shape()), tb ? " (transposed)" : "",
           db.rows);
  const bool a_batched = a.dim() > 2, b_batched = b.dim() > 2;
  const Shape batch_shape = a_batched ? batch_shape_of(a) : batch_shape_of(b);
  WF_CHECK(!(a_batched && b_batched) || batch_shape_of(b) == batch_shape,
           "{}: batch dims of a {} and b {} differ; b must have the same batch dims as a, or be 2-D", name,
           shape_str(a.shape()), shape_str(b.shape()));
  const std::int64_t batch = shape_numel(batch_shape);

  const ops::Kernels k = ops::kernels_for(name, {a, b});
  const ProductGeometry geo{ta, tb, M, N, K, a.size(-1), b.size(-1), a_batched ? a.size(-2) * a.size(-1) : 0,
                            b_batched ? b.size(-2) * b.size(-1) : 0, batch, batch_shape};
  if (a.dtype() == DType::bf16) {
    // bf16 multiplies with f32 accumulation into an f32 result, rounded to bf16 once.
    return product<bf16, float>(k, geo, a.data<bf16>(), b.data<bf16>(), sum_batch).to(DType::bf16);
  }
  return ops::compute_in(name, a.dtype(), {a, b}, [&](auto tag, const TensorList& c) {
    using T = decltype(tag);
    return product<T, T>(k, geo, c[0].template data<T>(), c[1].template data<T>(), sum_batch);
  });
}

void check_matmul_args(const Tensor& a, const Tensor& b) {
  ops::check_same_dtype_device("matmul", a, b);
  ops::check_floating("matmul", a, "a");
  WF_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: a {} and b {} must both have at least 2 dims", shape_str(a.shape()),
           shape_str(b.shape()));
  WF_CHECK(b.dim() == 2 || (b.dim() == a.dim() && batch_shape_of(a) == batch_shape_of(b)),
           "matmul: batch dims of a {} and b {} differ; b must have the same batch dims as a, or be 2-D",
           shape_str(a.shape()), shape_str(b.shape()));
}

// ---- the linear layer's pieces, shared by linear, linear_gelu and linear_add ----------------

// A linear's sizes, checked, and whether it is mixed precision (nn/precision.h): bf16 activations
// against f32 master weights.
struct LinearGeometry {
  std::int64_t rows, in_features, out_features;
  Shape x_shape, y_shape;
  bool mixed;
};

LinearGeometry check_linear(const char* name, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const bool mixed = x.defined() && weight.defined() && x.dtype() == DType::bf16 && weight.dtype() == DType::f32;
  const Tensor& same_as_weight = mixed ? weight : x;
  ops::check_same_dtype_device(name, same_as_weight, weight);
  ops::check_floating(name, x, "x");
  WF_CHECK(x.dim() >= 1 && weight.dim() == 2 && x.size(-1) == weight.size(1),
           "{}: x of shape {} does not fit weight of shape {}; expected x [..., in] and weight [out, in]", name,
           shape_str(x.shape()), shape_str(weight.shape()));
  const std::int64_t in_features = weight.size(1), out_features = weight.size(0);
  if (bias.defined()) {
    ops::check_same_dtype_device(name, same_as_weight, bias);
    WF_CHECK(bias.shape() == Shape{out_features},
             "{}: bias of shape {} does not match weight of shape {}; expected [{}]", name, shape_str(bias.shape()),
             shape_str(weight.shape()), out_features);
  }
  Shape y_shape = x.shape();
  y_shape.back() = out_features;
  return {ops::rows_of(x.shape()), in_features, out_features, x.shape(), y_shape, mixed};
}

// What a linear node computes after the product: nothing (linear), GPT-2's GELU (linear_gelu) or
// the residual's add (linear_add).
enum class Epilogue { none, gelu, add };

// A linear's forward values for in = {x, weight, bias} (and the residual with Epilogue::add), in x's dtype.
struct LinearValues {
  Tensor pre;     // x·Wᵀ + b: linear's output, the GELU's input, or with Epilogue::add residual + x·Wᵀ + b
  Tensor gelu;    // gelu(pre) from the same entry (Epilogue::gelu), else undefined
  Tensor weight;  // the weight operand of the product (a bf16 copy for bf16 x), which the backward reads
};

// One backend entry: linear_forward, linear_gelu_forward or linear_add_forward. bf16 x multiplies
// in bf16 with a bf16 copy of the weight (the weight itself unless mixed), f32 accumulation, bias
// and residual, and one rounding of each result to bf16 at the end; other dtypes run in their
// compute dtype.
LinearValues linear_values(const char* name, const LinearGeometry& g, const TensorList& in, Epilogue epilogue) {
  const ops::Kernels k = ops::kernels_for(name, {in[0], in[1], in[2], epilogue == Epilogue::add ? in[3] : in[2]});
  const auto launch = [&](DType operands, DType result, const TensorList& c) {
    const Tensor &x = c[0], &w = c[1], &b = c[2];
    Tensor pre = Tensor::empty(g.y_shape, result, k.device());
    Tensor y = epilogue == Epilogue::gelu ? Tensor::empty(g.y_shape, result, k.device()) : Tensor();
    const void* bias = b.defined() ? b.raw_data() : nullptr;
    switch (epilogue) {
      case Epilogue::none:
        k->linear_forward(k.stream, operands, g.rows, g.in_features, g.out_features, x.raw_data(), w.raw_data(), bias,
                          pre.raw_data());
        break;
      case Epilogue::gelu:
        k->linear_gelu_forward(k.stream, operands, g.rows, g.in_features, g.out_features, x.raw_data(), w.raw_data(),
                               bias, pre.raw_data(), y.raw_data());
        break;
      case Epilogue::add:
        k->linear_add_forward(k.stream, operands, g.rows, g.in_features, g.out_features, x.raw_data(), w.raw_data(),
                              bias, c[3].raw_data(), pre.raw_data());
        break;
    }
    return TensorList{pre, y};
  };
  if (in[0].dtype() == DType::bf16) {
    const Tensor w16 = in[1].to(DType::bf16);
    TensorList c{in[0], w16, in[2].defined() ? in[2].to(DType::f32) : Tensor()};
    if (epilogue == Epilogue::add) c.push_back(in[3].to(DType::f32));
    const TensorList out = launch(DType::bf16, DType::f32, c);
    return {out[0].to(DType::bf16), epilogue == Epilogue::gelu ? out[1].to(DType::bf16) : Tensor(), w16};
  }
  const TensorList out = ops::compute_in(name, in[0].dtype(), in, [&](auto tag, const TensorList& c) {
    return launch(dtype_v<decltype(tag)>, dtype_v<decltype(tag)>, c);
  });
  return {out[0], out[1], in[1]};
}

// A linear's gradients {dx, dW, db} for the gradient g of its output (pre's), from the saved x and
// weight operand.
TensorList linear_gradients(const char* name, const LinearGeometry& geo, const Context& ctx, const Tensor& x,
                            const Tensor& W, const Tensor& g) {
  const std::int64_t rows = geo.rows, in_features = geo.in_features, out_features = geo.out_features;
  const Tensor x2 = x.view({rows, in_features});
  const Tensor g2 = g.view({rows, out_features});
  Tensor dx, dW, db;
  if (ctx.needs_input_grad(0)) dx = batched_product(name, g2, false, W, false, false).view(geo.x_shape);
  // dW = dyᵀ·x over every row of every leading dim at once: one GEMM with K = rows. Mixed precision:
  // the weight's and the bias's gradients come back f32 straight from the GEMM's f32 accumulators,
  // never rounded to bf16.
  if (ctx.needs_input_grad(1)) {
    dW = geo.mixed ? product<bf16, float>(ops::kernels_for(name, {g2, x2}),
                                          {true, false, out_features, in_features, rows, out_features, in_features, 0,
                                           0, 1, {}},
                                          g2.data<bf16>(), x2.data<bf16>(), false)
                   : batched_product(name, g2, true, x2, false, false);
  }
  if (ctx.needs_input_grad(2)) db = sum_to_shape(geo.mixed ? g2.to(DType::f32) : g2, {out_features});
  return TensorList{dx, dW, db};
}

// Whether a linear node with `epilogue` runs as the backend's one entry for x's dtype. f32 and f64
// always do: unfused, the entry is the composition bit for bit. Narrower activations round
// linear's output (bf16 or f16) before the GELU or the add when unfused, so they take the one
// entry only where the backend fuses it (backend.h), and otherwise keep the unfused path's bits.
bool one_entry(const char* name, const Tensor& x, Epilogue epilogue) {
  const DType dtype = x.dtype();
  if (dtype == DType::f32 || dtype == DType::f64) return true;
  if (dtype != DType::bf16) return false;
  const ops::Kernels k = ops::kernels_for(name, {x});
  return epilogue == Epilogue::gelu ? k->fuses_linear_gelu(dtype) : k->fuses_linear_add(dtype);
}

// linear, linear_gelu or linear_add as one autograd node, inputs {x, weight, bias} (and the
// residual for linear_add). linear_gelu saves the pre-activation besides x and the weight operand,
// and its backward is the GELU's kernel, then linear's; linear_add saves what linear saves, and the
// residual's gradient is the output's gradient itself.
Tensor linear_node(const char* name, const TensorList& inputs, Epilogue epilogue) {
  const LinearGeometry g = check_linear(name, inputs[0], inputs[1], inputs[2]);
  return autograd::apply_function(
      name, inputs,
      [=](Context& ctx, const TensorList& in) {
        if (epilogue == Epilogue::none) {
          const LinearValues v = linear_values(name, g, in, epilogue);
          ctx.save_for_backward({in[0], v.weight});
          return TensorList{v.pre};
        }
        const bool fused = one_entry(name, in[0], epilogue);
        LinearValues v = fused ? linear_values(name, g, in, epilogue)
                               : linear_values(name, g, {in[0], in[1], in[2]}, Epilogue::none);
        if (epilogue == Epilogue::add) {
          ctx.save_for_backward({in[0], v.weight});
          // Unfused: add(residual, linear)'s kernel on linear's rounded output (no node: forwards run without grad).
          return TensorList{fused ? v.pre : add(in[3], v.pre)};
        }
        if (!fused) v.gelu = ops::gelu_values(v.pre);
        ctx.save_for_backward({in[0], v.weight, v.pre});
        return TensorList{v.gelu};
      },
      [=](Context& ctx, const TensorList& grad) {
        const Tensor d_pre = epilogue == Epilogue::gelu ? ops::gelu_backward_values(ctx.saved()[2], grad[0]) : grad[0];
        TensorList grads = linear_gradients(name, g, ctx, ctx.saved()[0], ctx.saved()[1], d_pre);
        // d residual = d y: passed on as it is, no copy (as add's backward does).
        if (epilogue == Epilogue::add) grads.push_back(ctx.needs_input_grad(3) ? grad[0] : Tensor());
        return grads;
      })[0];
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  check_matmul_args(a, b);
  const bool ta = transpose_a, tb = transpose_b;
  const bool b_shared = b.dim() == 2 && a.dim() > 2;
  return autograd::apply_function(
      "matmul", {a, b},
      [=](Context& ctx, const TensorList& in) {
        ctx.save_for_backward({in[0], in[1]});
        return TensorList{batched_product("matmul", in[0], ta, in[1], tb, false)};
      },
      [=](Context& ctx, const TensorList& grad) {
        const Tensor &A = ctx.saved()[0], &B = ctx.saved()[1], &g = grad[0];
        // C = op(A)·op(B): d op(A) = dC·op(B)ᵀ and d op(B) = op(A)ᵀ·dC, each transposed back
        // when the operand was stored transposed.
        Tensor dA, dB;
        if (ctx.needs_input_grad(0)) {
          dA = ta ? batched_product("matmul backward", B, tb, g, true, false)
                  : batched_product("matmul backward", g, false, B, !tb, false);
        }
        if (ctx.needs_input_grad(1)) {
          dB = tb ? batched_product("matmul backward", g, true, A, ta, b_shared)
                  : batched_product("matmul backward", A, !ta, g, false, b_shared);
        }
        return TensorList{dA, dB};
      })[0];
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_node("linear", {x, weight, bias}, Epilogue::none);
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_node("linear_gelu", {x, weight, bias}, Epilogue::gelu);
}

Tensor linear_add(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual) {
  constexpr const char* name = "linear_add";
  const LinearGeometry g = check_linear(name, x, weight, bias);
  WF_CHECK(residual.defined(), "{}: the residual is undefined; pass the tensor to add, or call linear", name);
  ops::check_same_dtype_device(name, x, residual);
  WF_CHECK(residual.shape() == g.y_shape,
           "{}: residual of shape {} does not match the output of shape {} (x {} through weight {}); it is added "
           "without broadcasting",
           name, shape_str(residual.shape()), shape_str(g.y_shape), shape_str(x.shape()), shape_str(weight.shape()));
  return linear_node(name, {x, weight, bias, residual}, Epilogue::add);
}

}  // namespace wf
