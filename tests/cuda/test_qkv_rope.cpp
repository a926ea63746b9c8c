// The fused QKV split + RoPE on the GPU against the CPU kernels (kernels/cpu/qkv_rope.h), forward
// and backward, rope on and off (odd head_dim for the plain split), GQA G = 1, 2, 4, null gradients.
// Both compute the angles in double from the same host frequency table; only sin/cos and the final
// rounding may differ (f32 1e-5, f64 1e-12).
#include <catch2/catch.hpp>

#include <random>
#include <type_traits>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

using namespace wf;
using namespace wf::cuda_test;

TEMPLATE_TEST_CASE("cuda qkv_rope forward and backward match the CPU", "[cuda][embedding][rope]", float, double) {
  using T = TestType;
  const DType dt = dtype_v<T>;
  const double rtol = std::is_same_v<T, float> ? 1e-5 : 1e-12, atol = std::is_same_v<T, float> ? 1e-6 : 1e-12;
  std::uint64_t salt = 70;
  for (kernels::QkvRopeShape s : {kernels::QkvRopeShape{2, 33, 2, 4, 64, true, 10000.0},
                                  kernels::QkvRopeShape{1, 17, 3, 1, 128, true, 500000.0},
                                  kernels::QkvRopeShape{3, 5, 1, 2, 2, true, 10000.0},
                                  kernels::QkvRopeShape{2, 4, 2, 2, 3, false, 10000.0}}) {
    for (const bool rotate : {true, false}) {
      if (rotate && s.head_dim % 2 != 0) continue;  // the plain split alone takes an odd head_dim
      s.rotate = rotate;
      CAPTURE(s.batch, s.tokens, s.groups, s.group_size, s.head_dim, s.rotate);
      const std::int64_t slots = s.group_size + 2;
      const Shape projected_shape{s.batch, s.tokens, s.groups * slots * s.head_dim},
          q_shape{s.batch, s.tokens, s.groups * s.group_size, s.head_dim}, kv_shape{s.batch, s.tokens, s.groups, s.head_dim};
      const Tensor projected = random_normal(projected_shape, fresh_seed(++salt), dt);
      const Tensor dq = random_normal(q_shape, fresh_seed(++salt), dt), dk = random_normal(kv_shape, fresh_seed(++salt), dt),
                   dv = random_normal(kv_shape, fresh_seed(++salt), dt);
      // Positions as sequence parallelism hands them out: not contiguous, far along a 32K sequence.
      std::mt19937_64 gen(fresh_seed(++salt));
      std::uniform_int_distribution<std::int64_t> pos(0, 32767);
      std::vector<std::int64_t> p(static_cast<std::size_t>(s.tokens));
      for (auto& e : p) e = pos(gen);
      const Tensor positions = Tensor::from_vector(p, {s.tokens}), g_positions = positions.to(gpu());

      std::vector<Tensor> want{Tensor::empty(q_shape, dt), Tensor::empty(kv_shape, dt), Tensor::empty(kv_shape, dt)};
      std::vector<Tensor> got{Tensor::empty(q_shape, dt, gpu()), Tensor::empty(kv_shape, dt, gpu()),
                              Tensor::empty(kv_shape, dt, gpu())};
      cpu_kernels().qkv_rope_forward(cpu_stream(), dt, s, projected.raw_data(), positions.data<std::int64_t>(),
                                     want[0].raw_data(), want[1].raw_data(), want[2].raw_data());
      const Tensor g_projected = projected.to(gpu());
      gpu_kernels().qkv_rope_forward(gpu_stream(), dt, s, g_projected.raw_data(), g_positions.data<std::int64_t>(),
                                     got[0].raw_data(), got[1].raw_data(), got[2].raw_data());
      for (std::size_t i = 0; i < 3; ++i) require_close(got[i], want[i], rtol, atol, "qkv_rope forward");

      // Backward with every gradient, then with each one missing (its slots zero).
      const Tensor g_dq = dq.to(gpu()), g_dk = dk.to(gpu()), g_dv = dv.to(gpu());
      for (int missing = -1; missing < 3; ++missing) {
        CAPTURE(missing);
        const auto pick = [&](int which, const Tensor& t) { return missing == which ? nullptr : t.raw_data(); };
        Tensor d_want = Tensor::empty(projected_shape, dt), d_got = Tensor::empty(projected_shape, dt, gpu());
        cpu_kernels().qkv_rope_backward(cpu_stream(), dt, s, pick(0, dq), pick(1, dk), pick(2, dv),
                                        positions.data<std::int64_t>(), d_want.raw_data());
        gpu_kernels().qkv_rope_backward(gpu_stream(), dt, s, pick(0, g_dq), pick(1, g_dk), pick(2, g_dv),
                                        g_positions.data<std::int64_t>(), d_got.raw_data());
        require_close(d_got, d_want, rtol, atol, "qkv_rope backward");
      }
    }
  }
}
