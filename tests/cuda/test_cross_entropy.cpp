// The CUDA cross-entropy entries (kernels/cuda/cross_entropy.cpp) against the CPU's on the same
// fresh random inputs: the fused forward, its reduction and backward, and the vocabulary-parallel
// pieces on several shards of one vocabulary.
//
// Tolerances: f32 rows take their exponentials in float on both sides (the CPU's SIMD exp and
// CUDA's expf differ by an ulp or two) and sum them in double, so the lse, the losses and the
// gradients agree to 1e-5 relative (1e-6 absolute near 0); f64 to 1e-12. The vocabulary-parallel
// sums are double on both sides: 1e-12. Counts, row maxima and the local-id plans are exact.
#include <algorithm>
#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace {

using namespace wf;
using namespace wf::cuda_test;

constexpr std::int64_t kIgnore = -100;

template <class T>
double rtol() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-12;
}
template <class T>
double atol() {
  return std::is_same_v<T, float> ? 1e-6 : 1e-12;
}

// Targets in [0, vocab), about one row in five ignore_index (never every row when rows > 1).
Tensor random_targets(std::int64_t rows, std::int64_t vocab, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int64_t> target(0, vocab - 1);
  std::vector<std::int64_t> t(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) t[r] = r % 5 == 3 ? kIgnore : target(gen);
  return Tensor::from_vector(t, {rows});
}

std::int64_t counted(const Tensor& targets) {
  std::int64_t c = 0;
  for (std::int64_t r = 0; r < targets.numel(); ++r) c += targets.data<std::int64_t>()[r] != kIgnore;
  return c;
}

Tensor i64_scalar(std::int64_t value, Device device) {
  return Tensor::from_vector(std::vector<std::int64_t>{value}, {1}).to(device);
}

// The forward's outputs on one device.
struct Forward {
  Tensor losses, lse, count;
};
Forward run_forward(kernels::Backend& k, const Stream& s, DType dt, const Tensor& logits, const Tensor& targets) {
  const std::int64_t rows = logits.size(0), vocab = logits.size(1);
  Forward f{Tensor::empty({rows}, dt, logits.device()), Tensor::empty({rows}, dt, logits.device()),
            Tensor::full({1}, -7, DType::i64, logits.device())};
  k.cross_entropy_forward(s, dt, rows, vocab, logits.raw_data(), targets.data<std::int64_t>(), kIgnore,
                          f.losses.raw_data(), f.lse.raw_data(), f.count.data<std::int64_t>());
  return f;
}

}  // namespace

TEMPLATE_TEST_CASE("cuda cross_entropy forward, reduce and backward match the CPU", "[cuda][cross_entropy]", float,
                   double) {
  using T = TestType;
  const DType dt = dtype_v<T>;
  struct Shape {
    std::int64_t rows, vocab;
  };
  std::uint64_t salt = 100;
  for (const Shape shape :
       {Shape{0, 31}, Shape{1, 1}, Shape{33, 257}, Shape{1000, 31}, Shape{7, 50257}, Shape{5, 1031}}) {
    CAPTURE(shape.rows, shape.vocab);
    const Tensor logits = random_normal({shape.rows, shape.vocab}, fresh_seed(++salt), dt);
    const Tensor targets = random_targets(shape.rows, shape.vocab, fresh_seed(++salt));
    const Tensor g_logits = logits.to(gpu()), g_targets = targets.to(gpu());

    const Forward want = run_forward(cpu_kernels(), cpu_stream(), dt, logits, targets);
    const Forward got = run_forward(gpu_kernels(), gpu_stream(), dt, g_logits, g_targets);
    require_close(got.losses, want.losses, rtol<T>(), atol<T>(), "losses");
    require_close(got.lse, want.lse, rtol<T>(), atol<T>(), "lse");
    require_equal(got.count, want.count, "count");
    REQUIRE(want.count.data<std::int64_t>()[0] == counted(targets));

    for (const bool mean : {false, true}) {
      CAPTURE(mean);
      Tensor want_loss = Tensor::empty({1}, dt), got_loss = Tensor::empty({1}, dt, gpu());
      cpu_kernels().cross_entropy_reduce(cpu_stream(), dt, shape.rows, want.losses.raw_data(),
                                         mean ? want.count.data<std::int64_t>() : nullptr, want_loss.raw_data());
      gpu_kernels().cross_entropy_reduce(gpu_stream(), dt, shape.rows, got.losses.raw_data(),
                                         mean ? got.count.data<std::int64_t>() : nullptr, got_loss.raw_data());
      require_close(got_loss, want_loss, rtol<T>(), atol<T>(), "reduced loss");

      for (const bool per_row : {false, true}) {
        CAPTURE(per_row);
        const Tensor grad_loss = Tensor::full({1}, 0.75, dt);
        const Tensor row_grad = random_normal({shape.rows}, fresh_seed(++salt), dt);
        Tensor want_d = Tensor::empty({shape.rows, shape.vocab}, dt);
        cpu_kernels().cross_entropy_backward(cpu_stream(), dt, shape.rows, shape.vocab, logits.raw_data(),
                                             targets.data<std::int64_t>(), kIgnore, want.lse.raw_data(),
                                             grad_loss.raw_data(), mean ? want.count.data<std::int64_t>() : nullptr,
                                             want_d.raw_data(), per_row ? row_grad.raw_data() : nullptr);
        const Tensor g_grad = grad_loss.to(gpu()), g_row = row_grad.to(gpu());
        Tensor got_d = Tensor::empty({shape.rows, shape.vocab}, dt, gpu());
        gpu_kernels().cross_entropy_backward(gpu_stream(), dt, shape.rows, shape.vocab, g_logits.raw_data(),
                                             g_targets.data<std::int64_t>(), kIgnore, got.lse.raw_data(),
                                             g_grad.raw_data(), mean ? got.count.data<std::int64_t>() : nullptr,
                                             got_d.raw_data(), per_row ? g_row.raw_data() : nullptr);
        require_close(got_d, want_d, rtol<T>(), atol<T>(), "dlogits");
      }
    }

    // In place (dlogits aliasing logits), as the op runs it to save a [rows, vocab] buffer.
    const Tensor grad_loss = Tensor::full({1}, 1.0, dt);
    Tensor want_d = Tensor::empty({shape.rows, shape.vocab}, dt);
    cpu_kernels().cross_entropy_backward(cpu_stream(), dt, shape.rows, shape.vocab, logits.raw_data(),
                                         targets.data<std::int64_t>(), kIgnore, want.lse.raw_data(),
                                         grad_loss.raw_data(), want.count.data<std::int64_t>(), want_d.raw_data(),
                                         nullptr);
    Tensor in_place = g_logits.clone(), g_grad = grad_loss.to(gpu());
    gpu_kernels().cross_entropy_backward(gpu_stream(), dt, shape.rows, shape.vocab, in_place.raw_data(),
                                         g_targets.data<std::int64_t>(), kIgnore, got.lse.raw_data(),
                                         g_grad.raw_data(), got.count.data<std::int64_t>(), in_place.raw_data(),
                                         nullptr);
    require_close(in_place, want_d, rtol<T>(), atol<T>(), "dlogits in place");
  }
}

TEMPLATE_TEST_CASE("cuda cross_entropy with every row ignored has count 0, mean 0 and zero gradients",
                   "[cuda][cross_entropy]", float, double) {
  using T = TestType;
  const DType dt = dtype_v<T>;
  const std::int64_t rows = 9, vocab = 33;
  const Tensor logits = random_normal({rows, vocab}, fresh_seed(1), dt).to(gpu());
  const Tensor targets = Tensor::full({rows}, double(kIgnore), DType::i64).to(gpu());
  const Forward f = run_forward(gpu_kernels(), gpu_stream(), dt, logits, targets);
  require_equal(f.count, Tensor::zeros({1}, DType::i64), "count");
  require_equal(f.losses, Tensor::zeros({rows}, dt), "losses");
  Tensor loss = Tensor::full({1}, 5, dt, gpu());
  gpu_kernels().cross_entropy_reduce(gpu_stream(), dt, rows, f.losses.raw_data(), f.count.data<std::int64_t>(),
                                     loss.raw_data());
  require_equal(loss, Tensor::zeros({1}, dt), "mean of no rows");
  const Tensor grad_loss = Tensor::full({1}, 1.0, dt, gpu());
  Tensor d = Tensor::full({rows, vocab}, 3, dt, gpu());
  gpu_kernels().cross_entropy_backward(gpu_stream(), dt, rows, vocab, logits.raw_data(), targets.data<std::int64_t>(),
                                       kIgnore, f.lse.raw_data(), grad_loss.raw_data(), f.count.data<std::int64_t>(),
                                       d.raw_data(), nullptr);
  require_equal(d, Tensor::zeros({rows, vocab}, dt), "dlogits");
}

TEMPLATE_TEST_CASE("cuda vocabulary-parallel cross-entropy pieces match the CPU on every shard",
                   "[cuda][cross_entropy][vocab_parallel]", float, double) {
  using T = TestType;
  const DType dt = dtype_v<T>;
  struct Split {
    std::int64_t rows, vocab, k;  // shards of k columns; the last holds padding, one may hold only padding
  };
  std::uint64_t salt = 200;
  for (const Split split : {Split{37, 1001, 300}, Split{5, 50257, 12565}, Split{1, 7, 3}, Split{12, 12, 4}}) {
    CAPTURE(split.rows, split.vocab, split.k);
    const std::int64_t rows = split.rows, k = split.k;
    const std::int64_t shards = (split.vocab + k - 1) / k + (split.vocab % k == 0 ? 1 : 0);  // a padding-only shard
    const Tensor logits = random_normal({rows, split.vocab}, fresh_seed(++salt), dt);
    const Tensor targets = random_targets(rows, split.vocab, fresh_seed(++salt));
    const Tensor g_targets = targets.to(gpu());
    const std::int64_t count = counted(targets);

    // Each shard's columns [start, start + k), the real ones first; padding holds noise.
    std::vector<Tensor> x(static_cast<std::size_t>(shards));
    std::vector<std::int64_t> start(x.size()), own(x.size());
    for (std::int64_t s = 0; s < shards; ++s) {
      start[s] = s * k;
      own[s] = std::max<std::int64_t>(0, std::min(k, split.vocab - start[s]));
      x[s] = random_normal({rows, k}, fresh_seed(++salt), dt);
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t j = 0; j < own[s]; ++j) {
          x[s].data<T>()[r * k + j] = logits.data<T>()[r * split.vocab + start[s] + j];
        }
      }
    }

    // The row maxima, all-reduced (max) on the host.
    Tensor max = Tensor::full({rows}, -INFINITY, DType::f64);
    for (std::int64_t s = 0; s < shards; ++s) {
      CAPTURE(s);
      Tensor want = Tensor::empty({rows}, DType::f64), got = Tensor::empty({rows}, DType::f64, gpu());
      cpu_kernels().vocab_parallel_row_max(cpu_stream(), dt, rows, k, own[s], x[s].raw_data(), want.data<double>());
      const Tensor gx = x[s].to(gpu());
      gpu_kernels().vocab_parallel_row_max(gpu_stream(), dt, rows, k, own[s], gx.raw_data(), got.data<double>());
      require_equal(got, want, "row max");
      for (std::int64_t r = 0; r < rows; ++r) {
        max.data<double>()[r] = std::max(max.data<double>()[r], want.data<double>()[r]);
      }
    }
    const Tensor g_max = max.to(gpu());

    // The partial sums and target logits, all-reduced (sum) on the host.
    Tensor sums = Tensor::zeros({2 * rows}, DType::f64);
    for (std::int64_t s = 0; s < shards; ++s) {
      CAPTURE(s);
      Tensor want = Tensor::empty({2 * rows}, DType::f64), got = Tensor::empty({2 * rows}, DType::f64, gpu());
      cpu_kernels().vocab_parallel_partials(cpu_stream(), dt, rows, k, own[s], start[s], x[s].raw_data(),
                                            max.data<double>(), targets.data<std::int64_t>(), kIgnore,
                                            want.data<double>());
      const Tensor gx = x[s].to(gpu());
      gpu_kernels().vocab_parallel_partials(gpu_stream(), dt, rows, k, own[s], start[s], gx.raw_data(),
                                            g_max.data<double>(), g_targets.data<std::int64_t>(), kIgnore,
                                            got.data<double>());
      require_close(got, want, 1e-12, 1e-300, "partials");
      for (std::int64_t i = 0; i < 2 * rows; ++i) sums.data<double>()[i] += want.data<double>()[i];
    }
    const Tensor g_sums = sums.to(gpu());

    for (const bool mean : {false, true}) {
      CAPTURE(mean);
      const Tensor c = i64_scalar(count, Device::cpu()), g_c = c.to(gpu());
      Tensor want_lse = Tensor::empty({rows}, DType::f64), got_lse = Tensor::empty({rows}, DType::f64, gpu());
      Tensor want_loss = Tensor::empty({1}, DType::f64), got_loss = Tensor::empty({1}, DType::f64, gpu());
      cpu_kernels().vocab_parallel_loss(cpu_stream(), rows, max.data<double>(), sums.data<double>(),
                                        targets.data<std::int64_t>(), kIgnore,
                                        mean ? c.data<std::int64_t>() : nullptr, want_lse.data<double>(),
                                        want_loss.data<double>());
      gpu_kernels().vocab_parallel_loss(gpu_stream(), rows, g_max.data<double>(), g_sums.data<double>(),
                                        g_targets.data<std::int64_t>(), kIgnore,
                                        mean ? g_c.data<std::int64_t>() : nullptr, got_lse.data<double>(),
                                        got_loss.data<double>());
      require_close(got_lse, want_lse, 1e-12, 1e-12, "lse");
      require_close(got_loss, want_loss, 1e-12, 1e-12, "loss");

      const Tensor grad_loss = Tensor::full({1}, 1.25, dt), g_grad = grad_loss.to(gpu());
      const Tensor g_lse = want_lse.to(gpu());
      for (std::int64_t s = 0; s < shards; ++s) {
        CAPTURE(s);
        Tensor want = Tensor::empty({rows, k}, dt), got = Tensor::full({rows, k}, 9, dt, gpu());
        cpu_kernels().vocab_parallel_backward(cpu_stream(), dt, rows, k, own[s], start[s], x[s].raw_data(),
                                              targets.data<std::int64_t>(), kIgnore, want_lse.data<double>(),
                                              grad_loss.raw_data(), mean ? c.data<std::int64_t>() : nullptr,
                                              want.raw_data());
        const Tensor gx = x[s].to(gpu());
        gpu_kernels().vocab_parallel_backward(gpu_stream(), dt, rows, k, own[s], start[s], gx.raw_data(),
                                              g_targets.data<std::int64_t>(), kIgnore, g_lse.data<double>(),
                                              g_grad.raw_data(), mean ? g_c.data<std::int64_t>() : nullptr,
                                              got.raw_data());
        require_close(got, want, rtol<T>(), atol<T>(), "vocab-parallel dx");
      }
    }
  }
}

TEST_CASE("cuda vocab_parallel_local_ids gives the CPU's local rows and mask on every shard",
          "[cuda][cross_entropy][vocab_parallel]") {
  const std::int64_t n = 1037, vocab = 1001;
  std::mt19937_64 gen(fresh_seed(300));
  std::uniform_int_distribution<std::int64_t> id(0, vocab - 1);
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (auto& e : v) e = id(gen);
  v[0] = 0, v[1] = vocab - 1;
  const Tensor ids = Tensor::from_vector(v, {n}), g_ids = ids.to(gpu());
  for (const std::int64_t start : {std::int64_t{0}, std::int64_t{300}, std::int64_t{900}, std::int64_t{1001}}) {
    CAPTURE(start);
    const std::int64_t rows = 300;
    Tensor want_local = Tensor::empty({n}, DType::i64), want_mask = Tensor::empty({n}, DType::f64);
    Tensor got_local = Tensor::empty({n}, DType::i64, gpu()), got_mask = Tensor::empty({n}, DType::f64, gpu());
    cpu_kernels().vocab_parallel_local_ids(cpu_stream(), "test", n, vocab, start, rows, ids.data<std::int64_t>(),
                                           want_local.data<std::int64_t>(), want_mask.data<double>());
    gpu_kernels().vocab_parallel_local_ids(gpu_stream(), "test", n, vocab, start, rows, g_ids.data<std::int64_t>(),
                                           got_local.data<std::int64_t>(), got_mask.data<double>());
    require_equal(got_local, want_local, "local ids");
    require_equal(got_mask, want_mask, "mask");
  }
}

TEST_CASE("cuda cross_entropy and local ids raise a bad target or id at the next synchronisation",
          "[cuda][cross_entropy]") {
  const std::int64_t rows = 6, vocab = 40;
  const Tensor logits = random_normal({rows, vocab}, fresh_seed(400)).to(gpu());
  const Tensor targets = Tensor::from_vector(std::vector<std::int64_t>{1, kIgnore, 3, 4000, 5, 6}, {rows}).to(gpu());
  run_forward(gpu_kernels(), gpu_stream(), DType::f32, logits, targets);
  REQUIRE_THROWS_WITH(gpu_stream().synchronize(),
                      Catch::Contains("target 4000 of row 3 is outside the vocabulary [0, 40)"));
  gpu_stream().synchronize();  // raised once, then cleared

  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{1, 2, -5}, {3}).to(gpu());
  Tensor local = Tensor::empty({3}, DType::i64, gpu()), mask = Tensor::empty({3}, DType::f64, gpu());
  gpu_kernels().vocab_parallel_local_ids(gpu_stream(), "VocabParallelEmbedding", 3, vocab, 0, 20,
                                         ids.data<std::int64_t>(), local.data<std::int64_t>(), mask.data<double>());
  REQUIRE_THROWS_WITH(gpu_stream().synchronize(),
                      Catch::Contains("VocabParallelEmbedding: id -5 at flat index 2 is outside [0, 40)"));
}

TEST_CASE("cuda cross_entropy refuses dtypes it has no kernel for", "[cuda][cross_entropy]") {
  const Tensor logits = Tensor::zeros({2, 3}, DType::bf16, gpu());
  const Tensor targets = Tensor::zeros({2}, DType::i64, gpu());
  REQUIRE_THROWS_WITH(run_forward(gpu_kernels(), gpu_stream(), DType::bf16, logits, targets),
                      Catch::Contains("no kernel for dtype bf16"));
}
