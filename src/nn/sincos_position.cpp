#include "wallfacer/nn/sincos_position.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "src/ops/common.h"

namespace wf::nn {
namespace {

// The 1-D embedding of position p into out[0, dim) (f64).
void sincos_into(std::int64_t dim, double p, double* out) {
  const std::int64_t half = dim / 2;
  for (std::int64_t k = 0; k < half; ++k) {
    const double omega = 1.0 / std::pow(10000.0, static_cast<double>(k) / static_cast<double>(half));
    out[k] = std::sin(p * omega);
    out[half + k] = std::cos(p * omega);
  }
}

// The table, built on the host in f64, rounded once to f32 (the caller moves it to its device).
Tensor to_f32(const std::vector<double>& values, std::int64_t rows, std::int64_t dim) {
  return Tensor::from_vector(values, {rows, dim}).to(DType::f32);
}

}  // namespace

Tensor sincos_1d(std::int64_t dim, const Tensor& positions) {
  WF_CHECK(dim > 0 && dim % 2 == 0, "sincos_1d: dim must be positive and even, got {}", dim);
  WF_CHECK(positions.dim() == 1 && positions.dtype() == DType::i64, "sincos_1d: positions must be [n] i64, got {} {}",
           dtype_name(positions.dtype()), shape_str(positions.shape()));
  // A table built once on the host (positions are read there), returned on the positions' device.
  const std::vector<std::int64_t> host_positions = positions.to(Device::cpu()).to_vector<std::int64_t>();
  const auto n = static_cast<std::int64_t>(host_positions.size());
  std::vector<double> values(static_cast<std::size_t>(n * dim));
  for (std::int64_t i = 0; i < n; ++i) {
    sincos_into(dim, static_cast<double>(host_positions[static_cast<std::size_t>(i)]), values.data() + i * dim);
  }
  return to_f32(values, n, dim).to(positions.device());
}

Tensor sincos_3d(std::int64_t dim, std::int64_t frames, std::int64_t rows, std::int64_t cols) {
  WF_CHECK(dim > 0 && dim % 4 == 0, "sin-cos position embedding: dim must be a positive multiple of 4, got {}", dim);
  WF_CHECK(frames > 0 && rows > 0 && cols > 0, "sin-cos position embedding: frames, rows and cols must be positive, got {}, {}, {}",
           frames, rows, cols);
  const std::int64_t n = frames * rows * cols, half = dim / 2;
  std::vector<double> values(static_cast<std::size_t>(n * dim)), temporal(static_cast<std::size_t>(dim));
  for (std::int64_t f = 0; f < frames; ++f) {
    if (frames > 1) sincos_into(dim, static_cast<double>(f), temporal.data());
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        double* e = values.data() + ((f * rows + r) * cols + c) * dim;
        sincos_into(half, static_cast<double>(c), e);         // first half: the column
        sincos_into(half, static_cast<double>(r), e + half);  // second half: the row
        if (frames > 1) {
          for (std::int64_t k = 0; k < dim; ++k) e[k] += temporal[static_cast<std::size_t>(k)];
        }
      }
    }
  }
  return to_f32(values, n, dim);
}

Tensor sincos_2d(std::int64_t dim, std::int64_t rows, std::int64_t cols) { return sincos_3d(dim, 1, rows, cols); }

Tensor select_rows(const Tensor& x, const Tensor& positions) {
  WF_CHECK(x.dim() >= 2 && positions.dim() == 1 && positions.dtype() == DType::i64,
           "select_rows: expected x [..., N, d] and positions [n] i64, got {} and {} {}", shape_str(x.shape()),
           dtype_name(positions.dtype()), shape_str(positions.shape()));
  WF_CHECK(!x.requires_grad(), "select_rows: x must not require grad (it selects tables, inputs and targets)");
  const std::int64_t N = x.size(-2), n = positions.numel(), outer = x.numel() / std::max<std::int64_t>(N * x.size(-1), 1);
  Shape shape = x.shape();
  shape[shape.size() - 2] = n;
  const ops::Kernels k = ops::kernels_for("select_rows", {x, positions});
  Tensor out = Tensor::empty(shape, x.dtype(), k.device());
  k->select_rows(k.stream, dtype_size(x.dtype()), outer, N, x.size(-1), x.raw_data(), n,
                 positions.data<std::int64_t>(), out.raw_data());
  return out;
}

}  // namespace wf::nn
