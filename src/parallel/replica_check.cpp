// The tp replica check (replica_check.h).
#include "wallfacer/parallel/replica_check.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "src/ops/common.h"
#include "wallfacer/core/error.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/shape_ops.h"

namespace wf::parallel {
namespace {

// The roundings a replicated weight may differ by: none is expected (every rank applies the same
// update to the same values), a few ulps leave room for a reduction that rounds per rank.
constexpr double kRoundings = 4.0;

// The spacing of floating values near 1 in `dtype`.
double epsilon_of(DType dtype) {
  switch (dtype) {
    case DType::f64: return std::numeric_limits<double>::epsilon();
    case DType::bf16: return 0x1p-7;
    case DType::f16: return 0x1p-10;
    default: return std::numeric_limits<float>::epsilon();
  }
}

}  // namespace

int check_tp_replicas(const nn::Module& module, comm::Group& tp) {
  if (tp.size() == 1) return 0;
  std::vector<nn::NamedTensor> whole;
  const std::vector<nn::NamedTensor> named = module.named_parameters();
  const std::vector<nn::NamedShard> shards = module.named_parameter_shards();
  for (std::size_t i = 0; i < named.size(); ++i) {
    if (!shards[i].second.is_sharded()) whole.push_back(named[i]);
  }
  if (whole.empty()) return 0;
  // Every copy's largest and smallest entry over the ranks, in f64 (exact for f32 and bf16):
  // max(w) and max(−w) in one buffer, one all-reduce.
  std::vector<Tensor> flat;
  for (const auto& [name, p] : whole) flat.push_back(reshape(p.detach().to(DType::f64), {p.numel()}));
  const Tensor values = cat(flat, 0);
  Tensor extremes = cat({values, neg(values)}, 0);
  tp.all_reduce(extremes, comm::ReduceOp::max);
  // Per parameter its spread over the ranks and its largest entry, on the device; one host read.
  std::vector<std::int64_t> ends;
  for (const auto& [name, p] : whole) ends.push_back((ends.empty() ? 0 : ends.back()) + p.numel());
  const ops::Kernels k = ops::kernels_for("check_replicas", {extremes, values});
  Tensor found = Tensor::empty({2 * static_cast<std::int64_t>(whole.size())}, DType::f64, k.device());
  k->replica_spread(k.stream, values.numel(), ends, extremes.data<double>(), values.data<double>(),
                    found.data<double>());
  found = found.to(Device::cpu());
  const double* f = found.data<double>();
  std::vector<std::string> drifted;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    const double spread = f[2 * i], scale = f[2 * i + 1];
    const double bound = kRoundings * epsilon_of(whole[i].second.dtype()) * scale;
    if (spread > bound || std::isnan(spread)) {
      drifted.push_back(fmt::format("{} (copies differ by up to {:.3g}, its largest entry {:.3g})", whole[i].first,
                                    spread, scale));
    }
  }
  WF_CHECK(drifted.empty(),
           "check_replicas: the {} tensor-parallel ranks of group '{}' hold different copies of {} replicated "
           "parameter(s) after the optimizer step: {}. Each is whole on every tp rank, so its gradient must be whole "
           "too; a parameter applied to this rank's part of the heads or features (a norm over split heads, "
           "QK-norm) gets only its part. Declare its role where it is built: LayerFactory::norm(type, dim, eps, "
           "nn::ActivationRegion::split), or set_gradient_partial_over(\"tp\") on the module, so that its gradient "
           "is summed over tp (docs/adding-a-model.md)",
           tp.size(), tp.name(), drifted.size(), fmt::join(drifted, "; "));
  return static_cast<int>(whole.size());
}

}  // namespace wf::parallel
