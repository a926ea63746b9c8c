#include "wallfacer/nn/sincos_position.h"

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

Tensor select_rows(const Tensor& table, const Tensor& positions) {
  WF_CHECK(table.dim() == 2 && positions.dim() == 1 && positions.dtype() == DType::i64,
           "select_rows: expected a [N, d] table and [n] i64 positions, got {} and {} {}", shape_str(table.shape()),
           dtype_name(positions.dtype()), shape_str(positions.shape()));
  const std::int64_t n = positions.numel(), d = table.size(1);
  const Tensor& src = table;
  Tensor out = Tensor::empty({n, d}, src.dtype());
  const std::size_t row_bytes = static_cast<std::size_t>(d) * dtype_size(src.dtype());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t p = positions.data<std::int64_t>()[i];
    WF_CHECK(p >= 0 && p < table.size(0), "select_rows: position {} is outside the table's {} rows", p, table.size(0));
    std::memcpy(static_cast<char*>(out.raw_data()) + static_cast<std::size_t>(i) * row_bytes,
                static_cast<const char*>(src.raw_data()) + static_cast<std::size_t>(p) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace wf::nn
