#include "wallfacer/nn/sincos_position.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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

Tensor to_f32(const std::vector<double>& values, std::int64_t rows, std::int64_t dim) {
  Tensor t = Tensor::empty({rows, dim}, DType::f32);
  float* o = t.data<float>();
  for (std::size_t i = 0; i < values.size(); ++i) o[i] = static_cast<float>(values[i]);
  return t;
}

}  // namespace

Tensor sincos_1d(std::int64_t dim, const Tensor& positions) {
  WF_CHECK(dim > 0 && dim % 2 == 0, "sincos_1d: dim must be positive and even, got {}", dim);
  WF_CHECK(positions.dim() == 1 && positions.dtype() == DType::i64, "sincos_1d: positions must be [n] i64, got {} {}",
           dtype_name(positions.dtype()), shape_str(positions.shape()));
  const std::int64_t n = positions.numel();
  std::vector<double> values(static_cast<std::size_t>(n * dim));
  for (std::int64_t i = 0; i < n; ++i) {
    sincos_into(dim, static_cast<double>(positions.data<std::int64_t>()[i]), values.data() + i * dim);
  }
  return to_f32(values, n, dim);
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
  Tensor out = Tensor::empty(shape, x.dtype());
  const std::size_t row = static_cast<std::size_t>(x.size(-1)) * dtype_size(x.dtype());
  const auto* src = static_cast<const char*>(x.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t p = positions.data<std::int64_t>()[i];
    WF_CHECK(p >= 0 && p < N, "select_rows: position {} is outside the {} rows", p, N);
    for (std::int64_t b = 0; b < outer; ++b) {
      std::memcpy(dst + static_cast<std::size_t>(b * n + i) * row, src + static_cast<std::size_t>(b * N + p) * row, row);
    }
  }
  return out;
}

}  // namespace wf::nn
