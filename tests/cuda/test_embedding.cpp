// The CUDA embedding and RoPE entries (kernels/cuda/embedding.cpp) against the CPU's on the same
// fresh random inputs.
//
// Tolerances: the forward is a gather and the backward sums each id's rows in token order in
// double and adds once, exactly as the CPU does, so both are bit for bit the CPU's (and the
// backward is the same on every run: no atomics). RoPE's angles are the CPU's bits (the same
// host-made frequencies); only CUDA's sin/cos differ from libm's in the last ulp of a double, so
// f32 agrees to 1e-5 relative (1e-6 absolute near 0) and f64 to 1e-12.
#include <random>
#include <type_traits>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace {

using namespace wf;
using namespace wf::cuda_test;

// Ids in [0, vocab), drawn from the first `distinct` rows only, so that ids repeat.
Tensor random_ids(std::int64_t tokens, std::int64_t vocab, std::int64_t distinct, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int64_t> pick(0, distinct - 1);
  std::uniform_int_distribution<std::int64_t> row(0, vocab - 1);
  std::vector<std::int64_t> rows(static_cast<std::size_t>(distinct));
  for (auto& r : rows) r = row(gen);
  rows.back() = vocab - 1;  // the table's last row, too
  std::vector<std::int64_t> ids(static_cast<std::size_t>(tokens));
  for (auto& id : ids) id = rows[static_cast<std::size_t>(pick(gen))];
  return Tensor::from_vector(ids, {tokens});
}

struct Table {
  std::int64_t tokens, dim, vocab, distinct;
};
constexpr Table kTables[] = {{1, 1, 1, 1}, {1000, 33, 257, 40}, {777, 64, 50257, 300}, {4096, 257, 31, 31}};

}  // namespace

TEMPLATE_TEST_CASE("cuda embedding forward and backward are the CPU's bit for bit, repeated ids included",
                   "[cuda][embedding]", float, double) {
  using T = TestType;
  const DType dt = dtype_v<T>;
  std::uint64_t salt = 10;
  for (const Table t : kTables) {
    CAPTURE(t.tokens, t.dim, t.vocab);
    const Tensor weight = random_normal({t.vocab, t.dim}, fresh_seed(++salt), dt);
    const Tensor ids = random_ids(t.tokens, t.vocab, t.distinct, fresh_seed(++salt));
    const Tensor g_weight = weight.to(gpu()), g_ids = ids.to(gpu());

    Tensor want = Tensor::empty({t.tokens, t.dim}, dt), got = Tensor::empty({t.tokens, t.dim}, dt, gpu());
    cpu_kernels().embedding_forward(cpu_stream(), dt, t.tokens, t.dim, t.vocab, weight.raw_data(),
                                    ids.data<std::int64_t>(), want.raw_data());
    gpu_kernels().embedding_forward(gpu_stream(), dt, t.tokens, t.dim, t.vocab, g_weight.raw_data(),
                                    g_ids.data<std::int64_t>(), got.raw_data());
    require_equal(got, want, "embedding forward");

    // Accumulated into a table that already holds gradients (rows of unused ids stay as they are).
    const Tensor dout = random_normal({t.tokens, t.dim}, fresh_seed(++salt), dt), g_dout = dout.to(gpu());
    Tensor want_dw = random_normal({t.vocab, t.dim}, fresh_seed(++salt), dt);
    Tensor got_dw = want_dw.to(gpu());
    cpu_kernels().embedding_backward(cpu_stream(), dt, t.tokens, t.dim, t.vocab, ids.data<std::int64_t>(),
                                     dout.raw_data(), want_dw.raw_data());
    gpu_kernels().embedding_backward(gpu_stream(), dt, t.tokens, t.dim, t.vocab, g_ids.data<std::int64_t>(),
                                     g_dout.raw_data(), got_dw.raw_data());
    require_equal(got_dw, want_dw, "embedding backward");

    // Deterministic: a second run from the same table gives the same bits.
    Tensor again = weight.to(gpu()), once = weight.to(gpu());
    gpu_kernels().embedding_backward(gpu_stream(), dt, t.tokens, t.dim, t.vocab, g_ids.data<std::int64_t>(),
                                     g_dout.raw_data(), once.raw_data());
    gpu_kernels().embedding_backward(gpu_stream(), dt, t.tokens, t.dim, t.vocab, g_ids.data<std::int64_t>(),
                                     g_dout.raw_data(), again.raw_data());
    require_equal(again, once, "embedding backward, run twice");
  }
}

TEST_CASE("cuda embedding raises an id outside the table at the next synchronisation", "[cuda][embedding]") {
  const std::int64_t dim = 8, vocab = 50;
  const Tensor weight = random_normal({vocab, dim}, fresh_seed(30)).to(gpu());
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{3, 50, 7}, {3}).to(gpu());
  Tensor out = Tensor::empty({3, dim}, DType::f32, gpu());
  gpu_kernels().embedding_forward(gpu_stream(), DType::f32, 3, dim, vocab, weight.raw_data(),
                                  ids.data<std::int64_t>(), out.raw_data());
  REQUIRE_THROWS_WITH(gpu_stream().synchronize(),
                      Catch::Contains("embedding_forward: token id 50 at index 1 is outside the vocabulary [0, 50)"));
  Tensor dweight = Tensor::zeros({vocab, dim}, DType::f32, gpu());
  gpu_kernels().embedding_backward(gpu_stream(), DType::f32, 3, dim, vocab, ids.data<std::int64_t>(), out.raw_data(),
                                   dweight.raw_data());
  REQUIRE_THROWS_WITH(gpu_stream().synchronize(),
                      Catch::Contains("embedding_backward: token id 50 at index 1 is outside the vocabulary [0, 50)"));
}

TEMPLATE_TEST_CASE("cuda rope and its inverse match the CPU, in place too", "[cuda][embedding][rope]", float,
                   double) {
  using T = TestType;
  const DType dt = dtype_v<T>;
  const double rtol = std::is_same_v<T, float> ? 1e-5 : 1e-12, atol = std::is_same_v<T, float> ? 1e-6 : 1e-12;
  struct Case {
    std::int64_t batch, tokens, heads, head_dim;
    double theta;
  };
  std::uint64_t salt = 40;
  for (const Case c : {Case{2, 33, 3, 64, 10000.0}, Case{1, 17, 1, 128, 500000.0}, Case{3, 1, 25, 2, 10000.0},
                       Case{1, 257, 4, 16, 10000.0}}) {
    CAPTURE(c.batch, c.tokens, c.heads, c.head_dim);
    const kernels::RopeShape shape{c.batch, c.tokens, c.heads, c.head_dim, c.theta};
    const Tensor x = random_normal({c.batch, c.tokens, c.heads, c.head_dim}, fresh_seed(++salt), dt);
    // Positions as sequence parallelism hands them out: not contiguous, and far along a 32K sequence.
    std::mt19937_64 gen(fresh_seed(++salt));
    std::uniform_int_distribution<std::int64_t> pos(0, 32767);
    std::vector<std::int64_t> p(static_cast<std::size_t>(c.tokens));
    for (auto& e : p) e = pos(gen);
    p[0] = 0;
    const Tensor positions = Tensor::from_vector(p, {c.tokens});
    const Tensor g_x = x.to(gpu()), g_positions = positions.to(gpu());
    for (const bool inverse : {false, true}) {
      CAPTURE(inverse);
      Tensor want = Tensor::empty(x.shape(), dt), got = Tensor::empty(x.shape(), dt, gpu());
      cpu_kernels().rope(cpu_stream(), dt, shape, x.raw_data(), positions.data<std::int64_t>(), inverse,
                         want.raw_data());
      gpu_kernels().rope(gpu_stream(), dt, shape, g_x.raw_data(), g_positions.data<std::int64_t>(), inverse,
                         got.raw_data());
      require_close(got, want, rtol, atol, "rope");
      Tensor in_place = g_x.clone();
      gpu_kernels().rope(gpu_stream(), dt, shape, in_place.raw_data(), g_positions.data<std::int64_t>(), inverse,
                         in_place.raw_data());
      require_close(in_place, want, rtol, atol, "rope in place");
    }
  }
}
