// Pointwise activations, softmax and dropout. Pointwise ops share one shape: run a kernel of the
// input's device (kernels/backend.h) in the compute dtype, save the input or the output, and write
// the backward with ops or the kernel's own backward.
#include "wallfacer/ops/activation.h"

#include <algorithm>
#include <functional>

#include "src/ops/common.h"
#include "src/ops/gelu_values.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/ops/arithmetic.h"

namespace wf {
namespace {

using autograd::Context;
using autograd::TensorList;
using kernels::UnaryOp;

// Launches a kernel on two tensors of one dtype: launch(kernels, dtype, n, in, out).
using UnaryLaunch = std::function<void(const ops::Kernels&, DType, std::int64_t, const void*, void*)>;
// launch(kernels, dtype, n, a, b, out) on two same-shaped tensors.
using BinaryLaunch = std::function<void(const ops::Kernels&, DType, std::int64_t, const void*, const void*, void*)>;

// y = launch(x) in x's compute dtype, on x's device; y has x's shape and dtype.
Tensor run_unary(const char* name, const Tensor& x, const UnaryLaunch& launch) {
  const ops::Kernels k = ops::kernels_for(name, {x});
  return ops::compute_in(name, x.dtype(), {x}, [&](auto tag, const TensorList& c) {
    using T = decltype(tag);
    Tensor y = Tensor::empty(c[0].shape(), dtype_v<T>, k.device());
    launch(k, dtype_v<T>, c[0].numel(), c[0].raw_data(), y.raw_data());
    return y;
  });
}

// out = launch(a, b) on two same-shaped tensors, in a's dtype.
Tensor run_binary(const char* name, const Tensor& a, const Tensor& b, const BinaryLaunch& launch) {
  const ops::Kernels k = ops::kernels_for(name, {a, b});
  return ops::compute_in(name, a.dtype(), {a, b}, [&](auto tag, const TensorList& c) {
    using T = decltype(tag);
    Tensor out = Tensor::empty(c[0].shape(), dtype_v<T>, k.device());
    launch(k, dtype_v<T>, c[0].numel(), c[0].raw_data(), c[1].raw_data(), out.raw_data());
    return out;
  });
}

// The unary kernel `op` as a launch.
UnaryLaunch unary_kernel(UnaryOp op) {
  return [op](const ops::Kernels& k, DType dt, std::int64_t n, const void* x, void* y) {
    k->unary_forward(k.stream, dt, op, n, x, y);
  };
}
// Its backward dx = dy·f'(saved) as a launch on (saved, dy).
BinaryLaunch unary_backward_kernel(UnaryOp op) {
  return [op](const ops::Kernels& k, DType dt, std::int64_t n, const void* saved, const void* dy, void* dx) {
    k->unary_backward(k.stream, dt, op, n, saved, dy, dx);
  };
}

enum class Saves { input, output };
// dx from the incoming gradient and the saved tensor (the input or the output).
using PointwiseGrad = std::function<Tensor(const Tensor& grad, const Tensor& saved)>;

Tensor pointwise(const char* name, const Tensor& x, Saves saves, UnaryOp op, PointwiseGrad grad_fn) {
  ops::check_floating(name, x, "the input");
  return autograd::apply_function(
      name, {x},
      [=](Context& ctx, const TensorList& in) {
        Tensor y = run_unary(name, in[0], unary_kernel(op));
        ctx.save_for_backward({saves == Saves::input ? in[0] : y});
        return TensorList{y};
      },
      [=](Context& ctx, const TensorList& grad) { return TensorList{grad_fn(grad[0], ctx.saved()[0])}; })[0];
}

// ---- softmax ----------------------------------------------------------------------------------

// softmax or log_softmax over `dim`. The kernels work on the last dim, so another dim is moved
// last for the computation (one copy each way); the saved output stays in that layout so the
// backward moves only the gradient.
Tensor softmax_over(const char* name, const Tensor& x, std::int64_t dim, bool take_log) {
  ops::check_floating(name, x, "the input");
  WF_CHECK(x.dim() > 0, "{}: needs at least one dim, got a 0-dim tensor", name);
  const std::int64_t d = normalize_dim(dim, x.dim());
  return autograd::apply_function(
      name, {x},
      [=](Context& ctx, const TensorList& in) {
        const Tensor xt = ops::move_dim_to_last(in[0], d);
        const std::int64_t cols = xt.size(-1), rows = ops::rows_of(xt.shape());
        Tensor yt = run_unary(name, xt, [&](const ops::Kernels& k, DType dt, std::int64_t, const void* x, void* y) {
          if (take_log) {
            k->log_softmax_forward(k.stream, dt, rows, cols, x, y);
          } else {
            k->softmax_forward(k.stream, dt, rows, cols, x, y);
          }
        });
        ctx.save_for_backward({yt});
        return TensorList{ops::move_last_to_dim(yt, d)};
      },
      [=](Context& ctx, const TensorList& grad) {
        const Tensor& yt = ctx.saved()[0];
        const Tensor gt = ops::move_dim_to_last(grad[0], d);
        const std::int64_t cols = yt.size(-1), rows = ops::rows_of(yt.shape());
        Tensor dxt = run_binary(
            name, yt, gt, [&](const ops::Kernels& k, DType dt, std::int64_t, const void* y, const void* dy, void* dx) {
              if (take_log) {
                k->log_softmax_backward(k.stream, dt, rows, cols, y, dy, dx);
              } else {
                k->softmax_backward(k.stream, dt, rows, cols, y, dy, dx);
              }
            });
        return TensorList{ops::move_last_to_dim(dxt, d)};
      })[0];
}

// ---- dropout ----------------------------------------------------------------------------------

using kernels::DropoutLayout;

// out[k] = keep(k) ? t[k] / (1 − p) : 0 with keep(k) = uniform_at(seed, first + whole index of k)
// >= p. The forward and the backward both call this, so the gradient sees exactly the
// forward's mask.
Tensor apply_dropout_mask(const Tensor& t, double p, std::uint64_t seed, std::uint64_t first, DropoutLayout layout) {
  return run_unary("dropout", t, [&](const ops::Kernels& k, DType dt, std::int64_t n, const void* x, void* y) {
    k->dropout_mask(k.stream, dt, n, p, seed, first, layout, x, y);
  });
}

// The dropout node: draws the whole tensor's `whole_numel` indices from the generator (so it
// ends where the whole tensor's dropout would leave it) and masks x by its part of them.
Tensor dropout_node(const Tensor& x, double p, Generator* gen, std::uint64_t whole_numel, DropoutLayout layout) {
  ops::check_floating("dropout", x, "the input");
  // The generator is advanced here, once per call, so both passes use the same (seed, first).
  Generator& g = gen ? *gen : default_generator();
  const std::uint64_t seed = g.seed();
  const std::uint64_t first = g.advance(whole_numel);
  return autograd::apply_function(
      "dropout", {x},
      [=](Context&, const TensorList& in) { return TensorList{apply_dropout_mask(in[0], p, seed, first, layout)}; },
      [=](Context&, const TensorList& grad) {
        return TensorList{apply_dropout_mask(grad[0], p, seed, first, layout)};
      })[0];
}

void check_dropout_p(double p) { WF_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability p={} must be in [0, 1]", p); }

}  // namespace

Tensor ops::gelu_values(const Tensor& x) { return run_unary("gelu", x, unary_kernel(UnaryOp::gelu)); }

Tensor ops::gelu_backward_values(const Tensor& x, const Tensor& grad) {
  return run_binary("gelu", x, grad, unary_backward_kernel(UnaryOp::gelu));
}

Tensor gelu(const Tensor& x) {
  return pointwise("gelu", x, Saves::input, UnaryOp::gelu,
                   [](const Tensor& g, const Tensor& saved_x) { return ops::gelu_backward_values(saved_x, g); });
}

Tensor silu(const Tensor& x) {
  return pointwise("silu", x, Saves::input, UnaryOp::silu, [](const Tensor& g, const Tensor& saved_x) {
    return run_binary("silu", saved_x, g, unary_backward_kernel(UnaryOp::silu));
  });
}

Tensor exp(const Tensor& x) {
  return pointwise("exp", x, Saves::output, UnaryOp::exp, [](const Tensor& g, const Tensor& y) { return mul(g, y); });
}

Tensor ln(const Tensor& x) {
  return pointwise("ln", x, Saves::input, UnaryOp::ln,
                   [](const Tensor& g, const Tensor& saved_x) { return div(g, saved_x); });
}

Tensor tanh(const Tensor& x) {
  return pointwise("tanh", x, Saves::output, UnaryOp::tanh, [](const Tensor& g, const Tensor& y) {
    return run_binary("tanh", y, g, unary_backward_kernel(UnaryOp::tanh));  // d tanh = 1 − y²
  });
}

Tensor softmax(const Tensor& x, std::int64_t dim) { return softmax_over("softmax", x, dim, false); }
Tensor log_softmax(const Tensor& x, std::int64_t dim) { return softmax_over("log_softmax", x, dim, true); }

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  check_dropout_p(p);
  if (!training || p == 0.0) return x;
  const auto n = static_cast<std::uint64_t>(x.numel());
  return dropout_node(x, p, gen, n, DropoutLayout{.block = std::max<std::uint64_t>(n, 1), .stride = n, .start = 0});
}

Tensor dropout_slice(const Tensor& x, double p, bool training, std::int64_t dim, int parts, int index,
                     Generator* gen) {
  check_dropout_p(p);
  WF_CHECK(x.defined() && dim >= -x.dim() && dim < x.dim(), "dropout_slice: dim {} is out of range for shape {}", dim,
           x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  WF_CHECK(parts >= 1 && index >= 0 && index < parts, "dropout_slice: slice {} of {} is not a valid slice", index,
           parts);
  if (!training || p == 0.0) return x;
  const std::int64_t d = normalize_dim(dim, x.dim());
  std::uint64_t block = 1;  // the elements of one slice row: dim d and the dims after it
  for (std::int64_t i = d; i < x.dim(); ++i) block *= static_cast<std::uint64_t>(x.size(i));
  const auto n = static_cast<std::uint64_t>(x.numel()), P = static_cast<std::uint64_t>(parts);
  return dropout_node(x, p, gen, n * P,
                      DropoutLayout{.block = std::max<std::uint64_t>(block, 1),
                                 .stride = block * P,
                                 .start = static_cast<std::uint64_t>(index) * block});
}

}  // namespace wf
