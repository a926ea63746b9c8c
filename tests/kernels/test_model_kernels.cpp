// The kernels of the models (kernels/cpu/diffusion.h, timestep_embedding.h, select_rows.h,
// clamp.h) against their plain references on fresh random inputs.
//
// Tolerances: the diffusion kernels read a schedule table whose constants the references
// recompute by their own formulas (ᾱ as a product, 1/√ᾱ as a quotient): 1e-12 relative for the
// f64 values; the f32 outputs round once from f64, so 1e-6 relative covers a one-ulp difference.
// The timestep embedding's reference takes the frequency as a power instead of exp∘log: 1e-6.
// Row selection and clamp copy or compare values: exact.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/clamp.h"
#include "kernels/cpu/diffusion.h"
#include "kernels/cpu/select_rows.h"
#include "kernels/cpu/timestep_embedding.h"
#include "kernels/kernel_testing.h"
#include "wallfacer/core/tensor.h"

namespace {

using namespace wf::kernels::cpu;
using namespace wf::testing;

constexpr std::int64_t kSteps = 1000;
constexpr double kBetaStart = 1e-4, kBetaEnd = 0.02;

// The ddpm table as models/diffusion builds it (the kernel's input), from the same recurrences.
std::vector<double> schedule_table() {
  std::vector<double> table(static_cast<std::size_t>(kSteps * wf::kernels::kScheduleColumns));
  std::vector<double> beta(kSteps), ab(kSteps), ab_prev(kSteps);
  double product = 1.0;
  for (std::int64_t t = 0; t < kSteps; ++t) {
    beta[t] = kBetaStart + (kBetaEnd - kBetaStart) * static_cast<double>(t) / static_cast<double>(kSteps - 1);
    ab_prev[t] = product;
    product *= 1.0 - beta[t];
    ab[t] = product;
  }
  for (std::int64_t t = 0; t < kSteps; ++t) {
    double* row = table.data() + t * wf::kernels::kScheduleColumns;
    const std::int64_t v = t == 0 ? 1 : t;
    row[wf::kernels::kSqrtAlphaBar] = std::sqrt(ab[t]);
    row[wf::kernels::kSqrtOneMinusAlphaBar] = std::sqrt(1.0 - ab[t]);
    row[wf::kernels::kSqrtRecipAlphaBar] = std::sqrt(1.0 / ab[t]);
    row[wf::kernels::kSqrtRecipAlphaBarM1] = std::sqrt(1.0 / ab[t] - 1.0);
    row[wf::kernels::kPosteriorMeanCoef1] = beta[t] * std::sqrt(ab_prev[t]) / (1.0 - ab[t]);
    row[wf::kernels::kPosteriorMeanCoef2] = (1.0 - ab_prev[t]) * std::sqrt(1.0 - beta[t]) / (1.0 - ab[t]);
    row[wf::kernels::kPosteriorLogVariance] = std::log(beta[v] * (1.0 - ab_prev[v]) / (1.0 - ab[v]));
    row[wf::kernels::kLogBeta] = std::log(beta[t]);
  }
  return table;
}

// Times of every kind a batch holds: step 0 (the decoder term), the last step, random steps.
std::vector<double> ddpm_times(std::int64_t batch, std::uint64_t seed) {
  std::mt19937 gen(static_cast<std::mt19937::result_type>(seed));
  std::uniform_int_distribution<std::int64_t> step(0, kSteps - 1);
  std::vector<double> t(static_cast<std::size_t>(batch));
  for (std::int64_t b = 0; b < batch; ++b) t[b] = b == 0 ? 0.0 : b == 1 ? double(kSteps - 1) : double(step(gen));
  return t;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE("diffusion_noise matches the reference for ddpm and flow", "[kernels][diffusion]") {
  const std::int64_t batch = 6, m = 37;
  const std::vector<double> table = schedule_table();
  const auto x0 = randn<float>(batch * m, 1), noise = randn<float>(batch * m, 2);
  for (const bool flow : {false, true}) {
    CAPTURE(flow);
    std::vector<double> times = ddpm_times(batch, 3);
    if (flow) {
      for (double& t : times) t /= double(kSteps);
    }
    std::vector<float> out(batch * m), want(batch * m);
    diffusion_noise(flow, batch, m, kSteps, table.data(), times.data(), x0.data(), noise.data(), out.data());
    diffusion_noise_reference(flow, batch, m, kSteps, kBetaStart, kBetaEnd, times.data(), x0.data(), noise.data(),
                              want.data());
    CHECK(max_relative_error(out, want) <= 1e-6);
  }
  // A ddpm time that is not a step is refused.
  const std::vector<double> bad = {0.5};
  std::vector<float> out(m);
  CHECK_THROWS_WITH(diffusion_noise(false, 1, m, kSteps, table.data(), bad.data(), x0.data(), noise.data(), out.data()),
                    Catch::Contains("integer step"));
}

TEST_CASE("diffusion_vb matches the reference, decoder steps included", "[kernels][diffusion]") {
  const std::int64_t batch = 5, m = 29, n = batch * m;
  const std::vector<double> table = schedule_table();
  const std::vector<double> times = ddpm_times(batch, 4);
  // v in [−1, 1]; x0 in [−1, 1] with the edge bins (|x0| > 0.999) present.
  std::vector<double> v = randn<double>(n, 5);
  for (double& e : v) e = std::tanh(e);
  std::vector<float> x0 = randn<float>(n, 6);
  for (float& e : x0) e = std::tanh(2.0f * e);
  x0[0] = -1.0f, x0[1] = 1.0f, x0[m] = -1.0f, x0[m + 1] = 1.0f;
  const auto eps = randn<double>(n, 7);
  const auto x_t = randn<float>(n, 8);
  std::vector<double> d_v(n), want_d_v(n);
  double total = 0, want_total = 0;
  diffusion_vb(batch, m, kSteps, table.data(), times.data(), v.data(), eps.data(), x0.data(), x_t.data(), d_v.data(),
               &total);
  diffusion_vb_reference(batch, m, kSteps, kBetaStart, kBetaEnd, times.data(), v.data(), eps.data(), x0.data(),
                         x_t.data(), want_d_v.data(), &want_total);
  CHECK(std::isfinite(total));
  CHECK(std::abs(total - want_total) <= 1e-9 * std::abs(want_total));
  CHECK(max_relative_error(d_v, want_d_v) <= 1e-9);
  // The derivative by v against central differences of one element's term.
  const double h = 1e-6;
  for (const std::int64_t i : {std::int64_t{0}, m + 3, n - 1}) {
    std::vector<double> up = v, down = v;
    up[i] += h, down[i] -= h;
    std::vector<double> scratch(n);
    double f_up = 0, f_down = 0;
    diffusion_vb(batch, m, kSteps, table.data(), times.data(), up.data(), eps.data(), x0.data(), x_t.data(),
                 scratch.data(), &f_up);
    diffusion_vb(batch, m, kSteps, table.data(), times.data(), down.data(), eps.data(), x0.data(), x_t.data(),
                 scratch.data(), &f_down);
    CHECK(std::abs((f_up - f_down) / (2 * h) - d_v[i]) <= 1e-5 * std::max(1.0, std::abs(d_v[i])));
  }
}

TEST_CASE("timestep_embedding matches the reference", "[kernels][timestep_embedding]") {
  for (const std::int64_t channels : {2, 8, 256}) {
    CAPTURE(channels);
    const std::int64_t batch = 4;
    std::vector<double> times = {0.0, 1.0, 999.0, 431.25};
    std::vector<float> out(batch * channels), want(batch * channels);
    timestep_embedding(batch, channels, 10000.0, times.data(), out.data());
    timestep_embedding_reference(batch, channels, 10000.0, times.data(), want.data());
    CHECK(max_relative_error(to_double(out), to_double(want)) <= 1e-6);
    CHECK(out[0] == 1.0f);  // cos(0)
  }
}

TEST_CASE("select_rows matches the reference and refuses positions outside the rows", "[kernels][select_rows]") {
  const std::int64_t outer = 3, rows = 7, row_elems = 5;
  const auto x = randn<double>(outer * rows * row_elems, 9);
  const std::vector<std::int64_t> positions = {6, 0, 3, 3};
  const auto n = static_cast<std::int64_t>(positions.size());
  std::vector<double> out(outer * n * row_elems), want(out.size());
  select_rows(sizeof(double), outer, rows, row_elems, x.data(), n, positions.data(), out.data());
  select_rows_reference(sizeof(double), outer, rows, row_elems, x.data(), n, positions.data(), want.data());
  CHECK(out == want);
  const std::vector<std::int64_t> bad = {7};
  CHECK_THROWS_WITH(select_rows(sizeof(double), outer, rows, row_elems, x.data(), 1, bad.data(), out.data()),
                    Catch::Contains("outside the 7 rows"));
}

TEMPLATE_TEST_CASE("clamp matches the reference, NaN kept", "[kernels][clamp]", float, double) {
  using T = TestType;
  auto x = randn<T>(101, 10, 2.0);
  x[7] = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> y(x.size()), want(x.size());
  clamp<T>(static_cast<std::int64_t>(x.size()), T(-1), T(1), x.data(), y.data());
  clamp_reference<T>(static_cast<std::int64_t>(x.size()), T(-1), T(1), x.data(), want.data());
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK((y[i] == want[i] || (std::isnan(y[i]) && std::isnan(want[i]))));
  }
  CHECK(std::isnan(y[7]));
}

TEST_CASE("vb_term: the learned-variance bound's derivative matches central differences, KL and decoder terms",
          "[kernels][diffusion]") {
  for (const bool decoder : {false, true}) {
    for (const double x0 : {-1.0, -0.3, 0.5, 1.0}) {
      for (const double v : {-0.8, 0.1, 0.9}) {
        const auto term_at = [&](double vv) {
          return vb_term(vv, x0, 0.2 * x0, std::log(2e-4), 0.1 + 0.15 * x0, std::log(1e-3), std::log(2e-4), decoder);
        };
        const auto value = [&](double vv) { return term_at(vv).value; };
        const VbTerm term = term_at(v);
        const double h = 1e-6, numeric = (value(v + h) - value(v - h)) / (2 * h);
        INFO("decoder " << decoder << " x0 " << x0 << " v " << v);
        CHECK(term.d_v == Approx(numeric).epsilon(1e-5).margin(1e-7));
        CHECK(std::isfinite(term.value));
      }
    }
  }
  // The KL vanishes where the model's Gaussian is the posterior.
  CHECK(vb_term(-1.0, 0.3, 0.2, std::log(2e-4), 0.2, std::log(1e-3), std::log(2e-4), false).value ==
        Approx(0.0).margin(1e-12));
}
