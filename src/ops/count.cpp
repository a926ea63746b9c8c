#include "wallfacer/ops/count.h"

#include "src/ops/common.h"

namespace wf {

Tensor count_targets_device(const Tensor& targets, std::int64_t ignore_index) {
  constexpr const char* kOp = "count_targets_device";
  ops::check_defined(kOp, targets, "targets");
  const ops::Kernels k = ops::kernels_for(kOp, {targets});
  const Tensor t = targets.to(DType::i64);  // a conversion on the targets' device
  Tensor count = Tensor::empty({}, DType::i64, k.device());
  k->count_not_equal(k.stream, t.numel(), t.data<std::int64_t>(), ignore_index, count.data<std::int64_t>());
  return count;
}

}  // namespace wf
