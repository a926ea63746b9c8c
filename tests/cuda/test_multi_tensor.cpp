// The CUDA multi-tensor entries (kernels/cuda/optimizer.cpp adamw_update_multi, kernels/cuda/reduce.cpp
// sum_of_squares_multi): one launch for a list of more tensors than one kernel's parameters could
// carry (the table crosses 64 entries), of odd sizes with 0 and 1 among them, against
//   - the GPU's single-tensor entry run per tensor: bit for bit (the same element arithmetic, the same
//     state from each tensor's own *applied; the same block partials and finishing tree per tensor);
//   - the CPU's multi-tensor entry: test_optimizer.cpp's tolerances for AdamW (1e-5 relative in f32,
//     1e-12 in f64; the device's pow in the bias correction), the f64 sums to 1e-12 (another order
//     of the same double additions).
// The counts are exact, and a NaN or infinite norm leaves every tensor of the list and every count
// as it was.
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace {

using namespace wf;
using namespace wf::cuda_test;

template <class T>
constexpr DType kDType = std::is_same_v<T, float> ? DType::f32 : DType::f64;
template <class T>
constexpr double kAdamWRtol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
template <class T>
constexpr double kAdamWAtol = std::is_same_v<T, float> ? 1e-6 : 1e-14;

// 70 tensors: sizes with tails, several blocks of the multi kernel (4096 elements each), 0 and 1.
std::vector<std::int64_t> tensor_sizes() {
  const std::int64_t cycle[] = {0, 1, 31, 33, 257, 1000, 4096, 4097, 12289, 1};
  std::vector<std::int64_t> sizes;
  for (int i = 0; i < 70; ++i) sizes.push_back(cycle[i % 10]);
  sizes[37] = 100003;
  return sizes;
}

void require_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  const Tensor g = got.to(Device::cpu()), w = want.to(Device::cpu());
  INFO(what);
  REQUIRE(g.shape() == w.shape());
  REQUIRE(std::memcmp(g.raw_data(), w.raw_data(), g.nbytes()) == 0);
}

// One parameter's state (EMA on two in three), its count starting at index % 5.
struct Param {
  Tensor param, grad, exp_avg, exp_avg_sq, ema, applied;
  Param to(Device d) const {
    return {param.to(d), grad.to(d), exp_avg.to(d), exp_avg_sq.to(d), ema.defined() ? ema.to(d) : Tensor(),
            applied.to(d)};
  }
  Param clone() const {
    return {param.clone(), grad.clone(), exp_avg.clone(), exp_avg_sq.clone(), ema.defined() ? ema.clone() : Tensor(),
            applied.clone()};
  }
  void* ema_data() { return ema.defined() ? ema.raw_data() : nullptr; }
};

std::vector<Param> fresh_params(DType dt, std::uint64_t salt) {
  std::vector<Param> params;
  const std::vector<std::int64_t> sizes = tensor_sizes();
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::int64_t n = sizes[i];
    const std::uint64_t seed = fresh_seed(salt + 8 * i);
    Tensor sq = random_normal({n}, seed + 3, DType::f64);
    for (std::int64_t k = 0; k < n; ++k) sq.data<double>()[k] = 1e-3 * sq.data<double>()[k] * sq.data<double>()[k];
    params.push_back({random_normal({n}, seed, dt), random_normal({n}, seed + 1, dt), random_normal({n}, seed + 2, dt),
                      sq.to(dt), i % 3 != 0 ? random_normal({n}, seed + 4, dt) : Tensor(),
                      Tensor::full({1}, static_cast<double>(i % 5), DType::i64)});
  }
  return params;
}

std::vector<kernels::AdamWTensor> list_of(std::vector<Param>& params) {
  std::vector<kernels::AdamWTensor> list;
  for (Param& p : params) {
    list.push_back({.n = p.param.numel(),
                    .param = p.param.raw_data(),
                    .grad = p.grad.raw_data(),
                    .exp_avg = p.exp_avg.raw_data(),
                    .exp_avg_sq = p.exp_avg_sq.raw_data(),
                    .ema = p.ema_data(),
                    .applied = p.applied.data<std::int64_t>()});
  }
  return list;
}

void require_params_bits(const std::vector<Param>& got, const std::vector<Param>& want) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    require_same_bits(got[i].param, want[i].param, "param");
    require_same_bits(got[i].exp_avg, want[i].exp_avg, "exp_avg");
    require_same_bits(got[i].exp_avg_sq, want[i].exp_avg_sq, "exp_avg_sq");
    if (want[i].ema.defined()) require_same_bits(got[i].ema, want[i].ema, "ema");
    require_same_bits(got[i].applied, want[i].applied, "applied");
  }
}

}  // namespace

TEMPLATE_TEST_CASE("cuda adamw_update_multi equals the GPU's adamw_update per tensor bit for bit and the CPU",
                   "[cuda][optimizer][multi_tensor]", float, double) {
  using T = TestType;
  const DType dt = kDType<T>;
  const kernels::AdamWParams hyper{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2};
  const kernels::EmaParams ema{.decay = 0.9999, .warmup = true};
  const std::vector<Param> start = fresh_params(dt, 300);
  std::vector<Param> cpu, multi, single;
  for (const Param& p : start) {
    cpu.push_back(p.clone());
    multi.push_back(p.to(gpu()));
    single.push_back(p.to(gpu()));
  }
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  // A finite norm, NaN and inf (every tensor skipped), another finite one, then none (always applies).
  const double norms[] = {1.5, nan, inf, 0.5, 0.0};
  for (int step = 0; step < 5; ++step) {
    CAPTURE(step);
    const bool no_norm = step == 4;
    const Tensor host_norm = Tensor::full({1}, norms[step], DType::f64), gpu_norm = host_norm.to(gpu());
    const double* h = no_norm ? nullptr : host_norm.data<double>();
    const double* g = no_norm ? nullptr : gpu_norm.data<double>();
    std::vector<Param> before;
    for (const Param& p : multi) before.push_back(p.to(Device::cpu()));

    gpu_kernels().adamw_update_multi(gpu_stream(), dt, list_of(multi), hyper, ema, g);
    for (Param& p : single) {
      gpu_kernels().adamw_update(gpu_stream(), dt, p.param.numel(), p.param.raw_data(), p.grad.raw_data(),
                                 p.exp_avg.raw_data(), p.exp_avg_sq.raw_data(), p.ema_data(), hyper, ema,
                                 p.applied.data<std::int64_t>(), g);
    }
    cpu_kernels().adamw_update_multi(cpu_stream(), dt, list_of(cpu), hyper, ema, h);

    require_params_bits(multi, single);
    if (step == 1 || step == 2) require_params_bits(multi, before);  // skipped: nothing moved
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      CAPTURE(i);
      require_equal(multi[i].applied, cpu[i].applied, "applied");
      require_close(multi[i].param, cpu[i].param, kAdamWRtol<T>, kAdamWAtol<T>, "param");
      require_close(multi[i].exp_avg, cpu[i].exp_avg, kAdamWRtol<T>, kAdamWAtol<T>, "exp_avg");
      require_close(multi[i].exp_avg_sq, cpu[i].exp_avg_sq, kAdamWRtol<T>, 0.0, "exp_avg_sq");
      if (cpu[i].ema.defined()) require_close(multi[i].ema, cpu[i].ema, kAdamWRtol<T>, kAdamWAtol<T>, "ema");
    }
  }
  for (std::size_t i = 0; i < start.size(); ++i) {
    CAPTURE(i);
    REQUIRE(multi[i].applied.to(Device::cpu()).data<std::int64_t>()[0] ==
            start[i].applied.data<std::int64_t>()[0] + 3);
  }
}

TEMPLATE_TEST_CASE("cuda sum_of_squares_multi equals the GPU's sum_of_products per tensor bit for bit and the CPU",
                   "[cuda][reduce][multi_tensor]", float, double) {
  using T = TestType;
  const DType dt = kDType<T>;
  std::vector<std::int64_t> sizes = tensor_sizes();
  sizes.push_back(std::int64_t{256} * 16 * 1024 + 777);  // past sum_of_products' 1024-block cap
  std::vector<Tensor> host, dev;
  std::vector<kernels::TensorSpan> host_list, dev_list;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    host.push_back(random_normal({sizes[i]}, fresh_seed(700 + i), dt));
    dev.push_back(host.back().to(gpu()));
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    host_list.push_back({.data = host[i].raw_data(), .n = sizes[i]});
    dev_list.push_back({.data = dev[i].raw_data(), .n = sizes[i]});
  }
  const auto count = static_cast<std::int64_t>(sizes.size());
  Tensor cpu_out = Tensor::full({count}, -1.0, DType::f64), cpu_total = Tensor::full({1}, 0.375, DType::f64);
  Tensor multi_out = Tensor::full({count}, -1.0, DType::f64, gpu()), single_out = multi_out.clone();
  Tensor multi_total = Tensor::full({1}, 0.375, DType::f64, gpu());
  cpu_kernels().sum_of_squares_multi(cpu_stream(), dt, host_list, cpu_out.data<double>(), cpu_total.data<double>());
  gpu_kernels().sum_of_squares_multi(gpu_stream(), dt, dev_list, multi_out.data<double>(),
                                     multi_total.data<double>());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    gpu_kernels().sum_of_products(gpu_stream(), dt, sizes[i], dev[i].raw_data(), dev[i].raw_data(),
                                  single_out.data<double>() + i);
  }
  require_same_bits(multi_out, single_out, "per-tensor sums");
  require_close(multi_out, cpu_out, 1e-12, 0.0, "per-tensor sums against the CPU");
  // The total: the per-tensor sums added to its start one at a time in list order.
  const Tensor sums = multi_out.to(Device::cpu());
  double want_total = 0.375;
  for (std::int64_t i = 0; i < count; ++i) want_total += sums.data<double>()[i];
  require_same_bits(multi_total, Tensor::full({1}, want_total, DType::f64), "total");
  require_close(multi_total, cpu_total, 1e-12, 0.0, "total against the CPU");

  // Without a total: the sums alone; an empty list writes nothing.
  Tensor again = Tensor::full({count}, -1.0, DType::f64, gpu());
  gpu_kernels().sum_of_squares_multi(gpu_stream(), dt, dev_list, again.data<double>(), nullptr);
  require_same_bits(again, single_out, "per-tensor sums without a total");
  gpu_kernels().sum_of_squares_multi(gpu_stream(), dt, {}, again.data<double>(), multi_total.data<double>());
  require_same_bits(multi_total, Tensor::full({1}, want_total, DType::f64), "total after an empty list");
}
