// Pointwise activations, softmax and dropout. Pointwise ops share one shape: run a kernel (or a
// plain loop where kernels/cpu has none) in the compute dtype, save the input or the output,
// and write the backward with ops or the kernel's own backward.
#include "wallfacer/ops/activation.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/softmax.h"
#include "src/ops/common.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/ops/arithmetic.h"

namespace wf {
namespace {

using autograd::Context;
using autograd::TensorList;

using kernels::cpu::parallel_for_each;
using kernels::cpu::parallel_for_rows;

// kernel(n, const T* x, T* y) applied to x in its compute dtype; y has x's shape and dtype.
template <class Kernel>
Tensor run_unary(const char* name, const Tensor& x, Kernel kernel) {
  return ops::compute_in(name, x.dtype(), {x}, [&](auto tag, const TensorList& c) {
    using T = decltype(tag);
    Tensor y = Tensor::empty(c[0].shape(), dtype_v<T>);
    kernel(c[0].numel(), c[0].data<T>(), y.data<T>());
    return y;
  });
}

// kernel(n, const T* a, const T* b, T* out) on two same-shaped tensors, in a's dtype.
template <class Kernel>
Tensor run_binary(const char* name, const Tensor& a, const Tensor& b, Kernel kernel) {
  return ops::compute_in(name, a.dtype(), {a, b}, [&](auto tag, const TensorList& c) {
    using T = decltype(tag);
    Tensor out = Tensor::empty(c[0].shape(), dtype_v<T>);
    kernel(c[0].numel(), c[0].data<T>(), c[1].data<T>(), out.data<T>());
    return out;
  });
}

enum class Saves { input, output };
// dx from the incoming gradient and the saved tensor (the input or the output).
using PointwiseGrad = std::function<Tensor(const Tensor& grad, const Tensor& saved)>;

template <class Kernel>
Tensor pointwise(const char* name, const Tensor& x, Saves saves, Kernel kernel, PointwiseGrad grad_fn) {
  ops::check_floating(name, x, "the input");
  ops::check_cpu(name, x);
  return autograd::apply_function(
      name, {x},
      [=](Context& ctx, const TensorList& in) {
        Tensor y = run_unary(name, in[0], kernel);
        ctx.save_for_backward({saves == Saves::input ? in[0] : y});
        return TensorList{y};
      },
      [=](Context& ctx, const TensorList& grad) { return TensorList{grad_fn(grad[0], ctx.saved()[0])}; })[0];
}

// ---- softmax ----------------------------------------------------------------------------------

// dx = dy − exp(y)·Σ_j dy_j per row, with y = log_softmax(x) (the row sum in double).
template <class T>
void log_softmax_backward_rows(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T* dx) {
  parallel_for_rows(rows, cols, [=](std::int64_t r) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    double total = 0.0;
    for (std::int64_t j = 0; j < cols; ++j) total += dyr[j];
    for (std::int64_t j = 0; j < cols; ++j) dxr[j] = dyr[j] - std::exp(yr[j]) * static_cast<T>(total);
  });
}

// softmax or log_softmax over `dim`. The kernels work on the last dim, so another dim is moved
// last for the computation (one copy each way); the saved output stays in that layout so the
// backward moves only the gradient.
Tensor softmax_over(const char* name, const Tensor& x, std::int64_t dim, bool take_log) {
  ops::check_floating(name, x, "the input");
  ops::check_cpu(name, x);
  WF_CHECK(x.dim() > 0, "{}: needs at least one dim, got a 0-dim tensor", name);
  const std::int64_t d = normalize_dim(dim, x.dim());
  return autograd::apply_function(
      name, {x},
      [=](Context& ctx, const TensorList& in) {
        const Tensor xt = ops::move_dim_to_last(in[0], d);
        const std::int64_t cols = xt.size(-1), rows = ops::rows_of(xt.shape());
        Tensor yt = run_unary(name, xt, [&](std::int64_t, const auto* src, auto* dst) {
          if (take_log) {
            kernels::cpu::log_softmax_forward(rows, cols, src, dst);
          } else {
            kernels::cpu::softmax_forward(rows, cols, src, dst);
          }
        });
        ctx.save_for_backward({yt});
        return TensorList{ops::move_last_to_dim(yt, d)};
      },
      [=](Context& ctx, const TensorList& grad) {
        const Tensor& yt = ctx.saved()[0];
        const Tensor gt = ops::move_dim_to_last(grad[0], d);
        const std::int64_t cols = yt.size(-1), rows = ops::rows_of(yt.shape());
        Tensor dxt = run_binary(name, yt, gt, [&](std::int64_t, const auto* y, const auto* dy, auto* dx) {
          if (take_log) {
            log_softmax_backward_rows(rows, cols, y, dy, dx);
          } else {
            kernels::cpu::softmax_backward(rows, cols, y, dy, dx);
          }
        });
        return TensorList{ops::move_last_to_dim(dxt, d)};
      })[0];
}

// ---- dropout ----------------------------------------------------------------------------------

// Where element k of a dropout input sits in the stream of the whole tensor it is a slice of:
// the input is the [outer, block / inner, inner] slice `index` of `parts` along one dim of a
// whole [outer, parts · block / inner, inner], so its rows of `block` elements are runs of the
// whole tensor's, `stride` = parts · block apart, the first at index · block. A whole input is
// one run (parts 1): element k is stream element k.
struct MaskLayout {
  std::uint64_t block = 1, stride = 1, start = 0;
  std::uint64_t whole_index(std::uint64_t k) const { return (k / block) * stride + start + k % block; }
};

// out[k] = keep(k) ? t[k] / (1 − p) : 0 with keep(k) = uniform_at(seed, first + whole index of k)
// >= p. The forward and the backward both call this, so the gradient sees exactly the
// forward's mask.
Tensor apply_dropout_mask(const Tensor& t, double p, std::uint64_t seed, std::uint64_t first, MaskLayout layout) {
  return run_unary("dropout", t, [&](std::int64_t n, const auto* src, auto* dst) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(src)>>;
    const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
    parallel_for_each(n, [&](std::int64_t k) {
      const bool keep = uniform_at(seed, first + layout.whole_index(static_cast<std::uint64_t>(k))) >= p;
      dst[k] = keep ? src[k] * keep_scale : T(0);
    });
  });
}

// The dropout node: draws the whole tensor's `whole_numel` indices from the generator (so it
// ends where the whole tensor's dropout would leave it) and masks x by its part of them.
Tensor dropout_node(const Tensor& x, double p, Generator* gen, std::uint64_t whole_numel, MaskLayout layout) {
  ops::check_floating("dropout", x, "the input");
  ops::check_cpu("dropout", x);
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

Tensor gelu(const Tensor& x) {
  return pointwise(
      "gelu", x, Saves::input, [](std::int64_t n, const auto* in, auto* out) { kernels::cpu::gelu_forward(n, in, out); },
      [](const Tensor& g, const Tensor& saved_x) {
        return run_binary("gelu", saved_x, g, [](std::int64_t n, const auto* xv, const auto* dy, auto* dx) {
          kernels::cpu::gelu_backward(n, xv, dy, dx);
        });
      });
}

Tensor silu(const Tensor& x) {
  return pointwise(
      "silu", x, Saves::input, [](std::int64_t n, const auto* in, auto* out) { kernels::cpu::silu_forward(n, in, out); },
      [](const Tensor& g, const Tensor& saved_x) {
        return run_binary("silu", saved_x, g, [](std::int64_t n, const auto* xv, const auto* dy, auto* dx) {
          kernels::cpu::silu_backward(n, xv, dy, dx);
        });
      });
}

Tensor exp(const Tensor& x) {
  return pointwise(
      "exp", x, Saves::output, [](std::int64_t n, const auto* in, auto* out) { kernels::cpu::exp_forward(n, in, out); },
      [](const Tensor& g, const Tensor& y) { return mul(g, y); });
}

Tensor ln(const Tensor& x) {
  return pointwise(
      "ln", x, Saves::input,
      [](std::int64_t n, const auto* in, auto* out) { parallel_for_each(n, [&](std::int64_t i) { out[i] = std::log(in[i]); }); },
      [](const Tensor& g, const Tensor& saved_x) { return div(g, saved_x); });
}

Tensor tanh(const Tensor& x) {
  return pointwise(
      "tanh", x, Saves::output,
      [](std::int64_t n, const auto* in, auto* out) { parallel_for_each(n, [&](std::int64_t i) { out[i] = std::tanh(in[i]); }); },
      [](const Tensor& g, const Tensor& y) {  // d tanh = 1 − y²
        return run_binary("tanh", g, y, [](std::int64_t n, const auto* dy, const auto* yv, auto* dx) {
          parallel_for_each(n, [&](std::int64_t i) { dx[i] = dy[i] * (1 - yv[i] * yv[i]); });
        });
      });
}

Tensor softmax(const Tensor& x, std::int64_t dim) { return softmax_over("softmax", x, dim, false); }
Tensor log_softmax(const Tensor& x, std::int64_t dim) { return softmax_over("log_softmax", x, dim, true); }

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  check_dropout_p(p);
  if (!training || p == 0.0) return x;
  const auto n = static_cast<std::uint64_t>(x.numel());
  return dropout_node(x, p, gen, n, MaskLayout{.block = std::max<std::uint64_t>(n, 1), .stride = n, .start = 0});
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
                      MaskLayout{.block = std::max<std::uint64_t>(block, 1),
                                 .stride = block * P,
                                 .start = static_cast<std::uint64_t>(index) * block});
}

}  // namespace wf
