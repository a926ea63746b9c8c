// The CUDA diffusion entries (kernels/cuda/diffusion.cpp) against the CPU's on the same fresh
// random inputs and the same ddpm schedule table.
//
// Tolerances: the noised sample is a·x0 + s·ε in f64 rounded once to f32 on both sides: 1e-6
// relative. L_vb runs in f64 through tanh, exp and log, whose CUDA versions differ from libm's in
// the last ulp or two, and nvcc fuses some of its multiply-adds. The KL terms (steps > 0) are
// well conditioned: d_v agrees to 1e-9 relative (1e-12 absolute). The decoder term (step 0) is
// not: its probability p = cdf(u+) − cdf(u−) is a difference of two tanh values near ±1, so an ulp
// of tanh (2.2e-16) moves p by up to 2.2e-16/p relative, and p may be as small as the 1e-12 floor
// of the log: its d_v (∝ 1/p) agrees to 2e-3 relative (1e-9 absolute where one side's p falls
// under the floor and its slope is 0). A 1-ulp jitter of tanh/exp/log on the host moved the
// decoder's d_v by up to 1.2e-4 relative. So the total (a sum of non-negative terms in another
// order) is checked to 1e-10 relative over the KL samples alone, and with the decoder's sample to
// that plus 2e-3 per decoder element (each one's -log2 p moves by at most that much). The timestep
// embedding's arguments are the CPU's bits; only sin/cos differ in a double's last ulp: 1e-6
// relative (1e-7 absolute) in f32.
#include <cmath>
#include <random>
#include <vector>

#include "kernels/diffusion_schedule.h"
#include "tests/cuda/cuda_test_util.h"

namespace {

using namespace wf;
using namespace wf::cuda_test;

constexpr std::int64_t kSteps = 1000;

// The linear-β ddpm table [kSteps, kScheduleColumns] as models/diffusion lays it out.
Tensor schedule_table() {
  namespace k = wf::kernels;
  std::vector<double> beta(kSteps), ab(kSteps), ab_prev(kSteps);
  double product = 1.0;
  for (std::int64_t t = 0; t < kSteps; ++t) {
    beta[t] = 1e-4 + (0.02 - 1e-4) * static_cast<double>(t) / static_cast<double>(kSteps - 1);
    ab_prev[t] = product;
    product *= 1.0 - beta[t];
    ab[t] = product;
  }
  std::vector<double> table(static_cast<std::size_t>(kSteps * k::kScheduleColumns));
  for (std::int64_t t = 0; t < kSteps; ++t) {
    double* row = table.data() + t * k::kScheduleColumns;
    const std::int64_t c = t == 0 ? 1 : t;  // the posterior variance clipped at step 0
    row[k::kSqrtAlphaBar] = std::sqrt(ab[t]);
    row[k::kSqrtOneMinusAlphaBar] = std::sqrt(1.0 - ab[t]);
    row[k::kSqrtRecipAlphaBar] = std::sqrt(1.0 / ab[t]);
    row[k::kSqrtRecipAlphaBarM1] = std::sqrt(1.0 / ab[t] - 1.0);
    row[k::kPosteriorMeanCoef1] = beta[t] * std::sqrt(ab_prev[t]) / (1.0 - ab[t]);
    row[k::kPosteriorMeanCoef2] = (1.0 - ab_prev[t]) * std::sqrt(1.0 - beta[t]) / (1.0 - ab[t]);
    row[k::kPosteriorLogVariance] = std::log(beta[c] * (1.0 - ab_prev[c]) / (1.0 - ab[c]));
    row[k::kLogBeta] = std::log(beta[t]);
  }
  return Tensor::from_vector(table, {kSteps, k::kScheduleColumns});
}

// ddpm times: step 0 (the decoder term), the last step, then random steps; flow: t in [0, 1].
Tensor random_times(std::int64_t batch, bool flow, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int64_t> step(0, kSteps - 1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> t(static_cast<std::size_t>(batch));
  for (std::int64_t b = 0; b < batch; ++b) {
    t[b] = flow ? unit(gen) : b == 0 ? 0.0 : b == 1 ? double(kSteps - 1) : double(step(gen));
  }
  return Tensor::from_vector(t, {batch});
}

struct Batch {
  std::int64_t batch, per_sample;
};
// Odd sizes, and one past the L_vb kernel's 1024 blocks of 256 threads (each thread loops).
constexpr Batch kBatches[] = {{1, 1}, {6, 37}, {3, 784}, {80, 4096}};

}  // namespace

TEST_CASE("cuda diffusion_noise matches the CPU for ddpm and flow", "[cuda][diffusion]") {
  const Tensor table = schedule_table(), g_table = table.to(gpu());
  std::uint64_t salt = 10;
  for (const Batch b : kBatches) {
    for (const bool flow : {false, true}) {
      CAPTURE(b.batch, b.per_sample, flow);
      const Tensor times = random_times(b.batch, flow, fresh_seed(++salt)), g_times = times.to(gpu());
      const Tensor x0 = random_normal({b.batch, b.per_sample}, fresh_seed(++salt)), g_x0 = x0.to(gpu());
      const Tensor noise = random_normal({b.batch, b.per_sample}, fresh_seed(++salt)), g_noise = noise.to(gpu());
      Tensor want = Tensor::empty(x0.shape()), got = Tensor::empty(x0.shape(), DType::f32, gpu());
      cpu_kernels().diffusion_noise(cpu_stream(), flow, b.batch, b.per_sample, kSteps, table.data<double>(),
                                    times.data<double>(), x0.data<float>(), noise.data<float>(), want.data<float>());
      gpu_kernels().diffusion_noise(gpu_stream(), flow, b.batch, b.per_sample, kSteps, g_table.data<double>(),
                                    g_times.data<double>(), g_x0.data<float>(), g_noise.data<float>(),
                                    got.data<float>());
      require_close(got, want, 1e-6, 1e-7, "noised sample");
    }
  }
}

TEST_CASE("cuda diffusion_vb matches the CPU, decoder steps included, and its total is the same every run",
          "[cuda][diffusion]") {
  const Tensor table = schedule_table(), g_table = table.to(gpu());
  std::uint64_t salt = 20;
  for (const Batch b : kBatches) {
    CAPTURE(b.batch, b.per_sample);
    const std::int64_t n = b.batch * b.per_sample;
    const Tensor times = random_times(b.batch, false, fresh_seed(++salt));
    // v in (−1, 1); x0 in (−1, 1) with the edge bins (|x0| > 0.999) present.
    std::vector<double> v = random_normal({n}, fresh_seed(++salt), DType::f64).to_vector<double>();
    for (double& e : v) e = std::tanh(e);
    std::vector<float> x0 = random_normal({n}, fresh_seed(++salt)).to_vector<float>();
    for (float& e : x0) e = std::tanh(2.0f * e);
    x0[0] = -1.0f;
    if (n > 1) x0[1] = 1.0f;
    const Tensor tv = Tensor::from_vector(v, {n}), tx0 = Tensor::from_vector(x0, {n});
    const Tensor eps = random_normal({n}, fresh_seed(++salt), DType::f64);
    const Tensor x_t = random_normal({n}, fresh_seed(++salt));

    Tensor want_dv = Tensor::empty({n}, DType::f64), want_total = Tensor::empty({1}, DType::f64);
    cpu_kernels().diffusion_vb(cpu_stream(), b.batch, b.per_sample, kSteps, table.data<double>(),
                               times.data<double>(), tv.data<double>(), eps.data<double>(), tx0.data<float>(),
                               x_t.data<float>(), want_dv.data<double>(), want_total.data<double>());
    const Tensor g_times = times.to(gpu()), g_v = tv.to(gpu()), g_eps = eps.to(gpu()), g_x0 = tx0.to(gpu());
    const Tensor g_xt = x_t.to(gpu());
    Tensor got_dv = Tensor::empty({n}, DType::f64, gpu()), got_total = Tensor::empty({1}, DType::f64, gpu());
    Tensor again = Tensor::empty({1}, DType::f64, gpu());
    for (Tensor* total : {&got_total, &again}) {
      gpu_kernels().diffusion_vb(gpu_stream(), b.batch, b.per_sample, kSteps, g_table.data<double>(),
                                 g_times.data<double>(), g_v.data<double>(), g_eps.data<double>(), g_x0.data<float>(),
                                 g_xt.data<float>(), got_dv.data<double>(), total->data<double>());
    }
    // Sample 0 is at step 0 (random_times): the decoder term, the rest KL terms.
    const Tensor got_cpu = got_dv.to(Device::cpu());
    require_close(got_cpu.slice0(0, b.per_sample), want_dv.slice0(0, b.per_sample), 2e-3, 1e-9, "d_v, decoder");
    require_close(got_cpu.slice0(b.per_sample, n), want_dv.slice0(b.per_sample, n), 1e-9, 1e-12, "d_v, KL");
    require_close(got_total, want_total, 1e-10, 2e-3 * static_cast<double>(b.per_sample), "total");
    require_equal(again, got_total, "total, run twice");
    if (b.batch > 1) {  // the KL samples alone: their total is well conditioned
      const std::int64_t skip = b.per_sample;
      Tensor want_kl = Tensor::empty({1}, DType::f64), got_kl = Tensor::empty({1}, DType::f64, gpu());
      cpu_kernels().diffusion_vb(cpu_stream(), b.batch - 1, b.per_sample, kSteps, table.data<double>(),
                                 times.data<double>() + 1, tv.data<double>() + skip, eps.data<double>() + skip,
                                 tx0.data<float>() + skip, x_t.data<float>() + skip, want_dv.data<double>() + skip,
                                 want_kl.data<double>());
      gpu_kernels().diffusion_vb(gpu_stream(), b.batch - 1, b.per_sample, kSteps, g_table.data<double>(),
                                 g_times.data<double>() + 1, g_v.data<double>() + skip, g_eps.data<double>() + skip,
                                 g_x0.data<float>() + skip, g_xt.data<float>() + skip, got_dv.data<double>() + skip,
                                 got_kl.data<double>());
      require_close(got_kl, want_kl, 1e-10, 0.0, "total of the KL samples");
    }
  }
}

TEST_CASE("cuda diffusion raises a ddpm time that is no step at the next synchronisation", "[cuda][diffusion]") {
  const Tensor table = schedule_table().to(gpu());
  const Tensor times = Tensor::from_vector(std::vector<double>{3.0, 7.5}, {2}).to(gpu());
  const Tensor x0 = random_normal({2, 5}, fresh_seed(30)).to(gpu());
  Tensor out = Tensor::empty({2, 5}, DType::f32, gpu());
  gpu_kernels().diffusion_noise(gpu_stream(), false, 2, 5, kSteps, table.data<double>(), times.data<double>(),
                                x0.data<float>(), x0.data<float>(), out.data<float>());
  REQUIRE_THROWS_WITH(gpu_stream().synchronize(),
                      Catch::Contains("a ddpm time is an integer step in [0, 1000)") && Catch::Contains("sample 1") &&
                          Catch::Contains("integer part: 7"));
}

TEST_CASE("cuda timestep_embedding matches the CPU", "[cuda][diffusion][timestep_embedding]") {
  std::uint64_t salt = 40;
  for (const std::int64_t channels : {2, 8, 256, 1000}) {
    for (const std::int64_t batch : {1, 33}) {
      CAPTURE(channels, batch);
      std::mt19937_64 gen(fresh_seed(++salt));
      std::uniform_real_distribution<double> time(0.0, 999.0);
      std::vector<double> t(static_cast<std::size_t>(batch));
      for (double& e : t) e = time(gen);
      t[0] = 0.0;
      const Tensor times = Tensor::from_vector(t, {batch}), g_times = times.to(gpu());
      Tensor want = Tensor::empty({batch, channels}), got = Tensor::empty({batch, channels}, DType::f32, gpu());
      cpu_kernels().timestep_embedding(cpu_stream(), batch, channels, 10000.0, times.data<double>(),
                                       want.data<float>());
      gpu_kernels().timestep_embedding(gpu_stream(), batch, channels, 10000.0, g_times.data<double>(),
                                       got.data<float>());
      require_close(got, want, 1e-6, 1e-7, "timestep embedding");
    }
  }
}
