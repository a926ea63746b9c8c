// The multi-tensor entries of the kernel seam (kernels/backend.h adamw_update_multi and
// sum_of_squares_multi) on the CPU backend: a list of parameters of odd sizes (0 and 1 among them),
// each with its own count of applied updates and some with an EMA, updated and reduced in one call,
// against the loop of single-tensor entries it replaces: bit for bit (the CPU runs that loop), the
// counts exact, a non-finite norm skipping every tensor. The checks on the list name the tensor at
// fault. And the block map of the CUDA multi-tensor launches (kernels/cuda/multi_tensor.h), which
// runs on the host too: every block of the grid finds the tensor that owns it.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/multi_tensor.h"
#include "kernels/kernel_testing.h"
#include "wallfacer/core/stream.h"

namespace {

using namespace wf::testing;
using wf::kernels::AdamWTensor;
using wf::kernels::TensorSpan;

wf::kernels::Backend& cpu_backend() { return wf::kernels::backend_for(wf::Device::cpu()); }
wf::Stream cpu_stream() { return wf::Stream::current(wf::Device::cpu()); }

template <class T>
constexpr wf::DType kDType = std::is_same_v<T, float> ? wf::DType::f32 : wf::DType::f64;

// Sizes with tails, one above the CPU kernels' threading and blocking thresholds, and empties.
const std::vector<std::int64_t> kSizes = {0, 1, 31, 33, 257, 1000, 0, 8193, 70001, 1, 5};

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// One parameter's state; the EMA empty for every third.
template <class T>
struct Param {
  std::vector<T> param, grad, exp_avg, exp_avg_sq, ema;
  std::int64_t applied = 0;
  bool operator==(const Param& o) const {
    return same_bits(param, o.param) && same_bits(grad, o.grad) && same_bits(exp_avg, o.exp_avg) &&
           same_bits(exp_avg_sq, o.exp_avg_sq) && same_bits(ema, o.ema) && applied == o.applied;
  }
  T* ema_data() { return ema.empty() ? nullptr : ema.data(); }
};

template <class T>
std::vector<Param<T>> fresh_params(std::uint64_t seed) {
  std::vector<Param<T>> params;
  for (std::size_t i = 0; i < kSizes.size(); ++i) {
    const std::int64_t n = kSizes[i];
    Param<T> p{randn<T>(n, seed + 5 * i), randn<T>(n, seed + 5 * i + 1), randn<T>(n, seed + 5 * i + 2, 0.1),
               randn<T>(n, seed + 5 * i + 3, 0.1), {}, static_cast<std::int64_t>(i % 4)};
    for (T& v : p.exp_avg_sq) v *= v;  // a second moment is not negative
    if (i % 3 != 0) p.ema = randn<T>(n, seed + 5 * i + 4);
    params.push_back(std::move(p));
  }
  return params;
}

template <class T>
std::vector<AdamWTensor> list_of(std::vector<Param<T>>& params) {
  std::vector<AdamWTensor> list;
  for (Param<T>& p : params) {
    list.push_back({.n = static_cast<std::int64_t>(p.param.size()),
                    .param = p.param.data(),
                    .grad = p.grad.data(),
                    .exp_avg = p.exp_avg.data(),
                    .exp_avg_sq = p.exp_avg_sq.data(),
                    .ema = p.ema_data(),
                    .applied = &p.applied});
  }
  return list;
}

}  // namespace

TEMPLATE_TEST_CASE("adamw_update_multi equals a loop of adamw_update bit for bit, and skips every tensor together",
                   "[kernels][optimizer][multi_tensor]", float, double) {
  using T = TestType;
  const wf::DType dt = kDType<T>;
  const wf::kernels::AdamWParams hyper{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  const wf::kernels::EmaParams ema{.decay = 0.999, .warmup = true};
  std::vector<Param<T>> multi = fresh_params<T>(11), loop = multi;
  const std::vector<Param<T>> start = multi;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  // Per step: a finite norm, a NaN and an inf (skipped), then no norm at all (always applies).
  const double norms[] = {1.5, nan, 0.25, inf, 0.0};
  for (int step = 0; step < 5; ++step) {
    CAPTURE(step);
    const double* norm = step == 4 ? nullptr : &norms[step];
    cpu_backend().adamw_update_multi(cpu_stream(), dt, list_of(multi), hyper, ema, norm);
    for (Param<T>& p : loop) {
      cpu_backend().adamw_update(cpu_stream(), dt, static_cast<std::int64_t>(p.param.size()), p.param.data(),
                                 p.grad.data(), p.exp_avg.data(), p.exp_avg_sq.data(), p.ema_data(), hyper, ema,
                                 &p.applied, norm);
    }
    for (std::size_t i = 0; i < multi.size(); ++i) {
      CAPTURE(i);
      CHECK(multi[i] == loop[i]);
    }
  }
  for (std::size_t i = 0; i < multi.size(); ++i) {
    CAPTURE(i);
    CHECK(multi[i].applied == start[i].applied + 3);  // steps 0, 2 and 4 applied, 1 and 3 skipped
    if (!multi[i].param.empty()) CHECK(!same_bits(multi[i].param, start[i].param));
  }
  // An empty list does nothing, and is no error.
  cpu_backend().adamw_update_multi(cpu_stream(), dt, {}, hyper, ema, nullptr);
}

TEMPLATE_TEST_CASE("sum_of_squares_multi equals sum_of_products per tensor and adds the total in list order",
                   "[kernels][reduce][multi_tensor]", float, double) {
  using T = TestType;
  const wf::DType dt = kDType<T>;
  std::vector<std::vector<T>> xs;
  std::vector<TensorSpan> list;
  for (std::size_t i = 0; i < kSizes.size(); ++i) xs.push_back(randn<T>(kSizes[i], 40 + i));
  for (const std::vector<T>& x : xs) list.push_back({.data = x.data(), .n = static_cast<std::int64_t>(x.size())});

  std::vector<double> out(xs.size(), -1.0), want(xs.size(), -2.0);
  double total = 0.375, want_total = 0.375;
  cpu_backend().sum_of_squares_multi(cpu_stream(), dt, list, out.data(), &total);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    cpu_backend().sum_of_products(cpu_stream(), dt, list[i].n, xs[i].data(), xs[i].data(), &want[i]);
    want_total += want[i];
  }
  CHECK(same_bits(out, want));
  CHECK(std::memcmp(&total, &want_total, sizeof(double)) == 0);
  CHECK(out[0] == 0.0);  // an empty tensor's squares

  // Without a total, only the per-tensor sums are written.
  std::vector<double> again(xs.size(), -1.0);
  cpu_backend().sum_of_squares_multi(cpu_stream(), dt, list, again.data(), nullptr);
  CHECK(same_bits(again, want));
}

TEST_CASE("the multi-tensor entries name the tensor at fault", "[kernels][optimizer][multi_tensor]") {
  std::vector<double> x(4, 1.0), g(4, 0.5), m(4, 0.0), v(4, 0.0);
  std::int64_t a = 0, b = 0;
  const auto tensor = [&](std::int64_t n, std::int64_t* applied) {
    return AdamWTensor{.n = n, .param = x.data(), .grad = g.data(), .exp_avg = m.data(), .exp_avg_sq = v.data(),
                       .ema = nullptr, .applied = applied};
  };
  const auto update = [&](const std::vector<AdamWTensor>& list, wf::DType dt = wf::DType::f64) {
    cpu_backend().adamw_update_multi(cpu_stream(), dt, list, {}, {}, nullptr);
  };
  CHECK_THROWS_WITH(update({tensor(4, &a), tensor(4, &b), tensor(4, &a)}),
                    Catch::Contains("tensors 0 and 2 share one count of applied updates"));
  CHECK_THROWS_WITH(update({tensor(4, &a), tensor(-1, &b)}), Catch::Contains("tensor 1 has a negative element count"));
  CHECK_THROWS_WITH(update({tensor(4, &a), tensor(4, nullptr)}),
                    Catch::Contains("tensor 1 has no count of applied updates"));
  CHECK_THROWS_WITH(update({tensor(4, &a)}, wf::DType::i64), Catch::Contains("f32 or f64"));
  CHECK(a == 0);  // nothing ran
  double out = 0;
  CHECK_THROWS_WITH(cpu_backend().sum_of_squares_multi(cpu_stream(), wf::DType::f64, {{x.data(), -3}}, &out, nullptr),
                    Catch::Contains("sum_of_squares_multi: tensor 0 has a negative element count -3"));
}

namespace {
struct Entry {
  std::int64_t n;
  wf::kernels::cuda::MultiTensorBlocks blocks;
};
}  // namespace

TEST_CASE("the multi-tensor grid gives every block to the tensor that owns it", "[kernels][multi_tensor]") {
  // Tensors with no blocks first, between and last; one alone.
  for (const std::vector<std::int64_t>& sizes : std::vector<std::vector<std::int64_t>>{
           {0, 0, 5, 1, 0, 0, 3, 0, 7, 0}, {4}, {0, 2}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}}) {
    std::vector<Entry> table;
    for (std::int64_t n : sizes) table.push_back({n, {}});
    const std::int64_t blocks = wf::kernels::cuda::lay_out_blocks(table, [](const Entry& e) { return e.n; });
    std::vector<std::int64_t> owner;
    for (std::size_t t = 0; t < table.size(); ++t) {
      CHECK(table[t].blocks.first == static_cast<std::int64_t>(owner.size()));
      owner.insert(owner.end(), static_cast<std::size_t>(table[t].n), static_cast<std::int64_t>(t));
    }
    REQUIRE(blocks == static_cast<std::int64_t>(owner.size()));
    for (std::int64_t b = 0; b < blocks; ++b) {
      CAPTURE(b);
      CHECK(wf::kernels::cuda::tensor_of_block(table.data(), static_cast<std::int64_t>(table.size()), b) ==
            owner[static_cast<std::size_t>(b)]);
    }
  }
}
