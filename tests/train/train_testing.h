#pragma once
// Helpers shared by the checkpoint tests: tensors of every dtype with values the PyTorch reference
// script (tests/reference/read_safetensors.py) recomputes, byte comparison of state dicts, and a
// file-size limit that makes writes fail the way a full disk does.
#include <signal.h>
#include <sys/resource.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "wallfacer/nn/state_dict.h"

namespace wf::train::testing {

// Element i of the reference tensors; exact in every dtype (also bf16 and f16). Keep in step
// with expected_value() in tests/reference/read_safetensors.py.
inline double reference_value(DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::i32: return static_cast<double>(3 * i - 5);
    case DType::i64: return static_cast<double>(3 * i - 5 + (std::int64_t{1} << 40));
    case DType::u8: return static_cast<double>((37 * i) % 256);
    default: return static_cast<double>(i % 7) - 3.0 + 0.5 * static_cast<double>(i % 2);
  }
}

inline Tensor reference_tensor(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, reference_value(dtype, i));
  return t;
}

// Every dtype, a 0-dim tensor and an empty one.
inline nn::StateDict reference_tensors() {
  nn::StateDict sd;
  sd.insert("f32", reference_tensor({2, 3}, DType::f32));
  sd.insert("f64", reference_tensor({4}, DType::f64));
  sd.insert("bf16", reference_tensor({3, 2}, DType::bf16));
  sd.insert("f16", reference_tensor({5}, DType::f16));
  sd.insert("i32", reference_tensor({2, 2}, DType::i32));
  sd.insert("i64", reference_tensor({3}, DType::i64));
  sd.insert("u8", reference_tensor({7}, DType::u8));
  sd.insert("scalar", reference_tensor({}, DType::f32));
  sd.insert("empty", reference_tensor({0, 4}, DType::f32));
  return sd;
}

// Same names in the same order, same shapes, dtypes and bytes.
inline void require_same(const nn::StateDict& actual, const nn::StateDict& expected) {
  REQUIRE(actual.keys() == expected.keys());
  for (const auto& [name, want] : expected) {
    INFO("tensor " << name);
    const Tensor& got = actual.at(name);
    REQUIRE(got.shape() == want.shape());
    REQUIRE(got.dtype() == want.dtype());
    REQUIRE(got.device().is_cpu());
    // (An empty tensor's data pointer may be null, which memcmp must not see.)
    REQUIRE((want.nbytes() == 0 || std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()) == 0));
  }
}

// While alive, writes that grow a file past `bytes` fail with EFBIG (a full disk, as the writer
// sees it) instead of raising SIGXFSZ.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    saved_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::signal(SIGXFSZ, saved_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  sighandler_t saved_handler_;
};

}  // namespace wf::train::testing
