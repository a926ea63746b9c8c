// The AdamW entries of the CUDA backend: torch.optim.AdamW's checks on the host (as
// kernels/cpu/optimizer.cpp makes them), the kernels of kernels/cuda/optimizer.cu on the stream.
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/optimizer.h"

namespace wf::kernels::cuda {

void CudaKernels::adamw_step(const Stream& stream, DType dtype, std::int64_t n, void* param, const void* grad,
                             void* exp_avg, void* exp_avg_sq, const AdamWParams& params) {
  check_adamw_params("adamw_step", n, params);
  WF_CHECK(params.step >= 1, "adamw_step: step is the 1-based count of updates (for bias correction), got {}",
           params.step);
  dispatch_floating(dtype, "adamw_step", [&](auto t) {
    using T = decltype(t);
    launch_adamw_step<T>(native(stream), n, static_cast<T*>(param), static_cast<const T*>(grad),
                         static_cast<T*>(exp_avg), static_cast<T*>(exp_avg_sq), params);
  });
}

void CudaKernels::adamw_update(const Stream& stream, DType dtype, std::int64_t n, void* param, const void* grad,
                               void* exp_avg, void* exp_avg_sq, void* ema, const AdamWParams& params,
                               const EmaParams& e, std::int64_t* applied, const double* grad_norm) {
  check_adamw_params("adamw_update", n, params);  // params.step is ignored: the device counts the updates
  WF_CHECK(applied != nullptr, "adamw_update: the count of applied updates (an i64 on the device) is required");
  dispatch_floating(dtype, "adamw_update", [&](auto t) {
    using T = decltype(t);
    launch_adamw_update<T>(native(stream), n, static_cast<T*>(param), static_cast<const T*>(grad),
                           static_cast<T*>(exp_avg), static_cast<T*>(exp_avg_sq), static_cast<T*>(ema), params, e,
                           applied, grad_norm);
  });
}

void CudaKernels::adamw_update_multi(const Stream& stream, DType dtype, const std::vector<AdamWTensor>& tensors,
                                     const AdamWParams& params, const EmaParams& e, const double* grad_norm) {
  check_adamw_params("adamw_update_multi", 0, params);  // params.step is ignored: the device counts the updates
  check_adamw_tensors(tensors, "adamw_update_multi");
  std::vector<AdamWMultiEntry> table;
  table.reserve(tensors.size());
  for (const AdamWTensor& t : tensors) {
    table.push_back({t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.ema, t.applied, t.n, {}});
  }
  const std::int64_t blocks =
      lay_out_blocks(table, [](const AdamWMultiEntry& entry) { return adamw_update_multi_blocks(entry.n); });
  WF_CHECK(blocks <= INT32_MAX, "adamw_update_multi: {} tensors need {} blocks, more than one launch takes; split "
           "the list", tensors.size(), blocks);
  dispatch_floating(dtype, "adamw_update_multi", [&](auto t) {
    using T = decltype(t);
    if (table.empty()) return;
    const detail::CudaScratch device_table(stream, table.data(), table.size() * sizeof(AdamWMultiEntry));
    launch_adamw_update_multi<T>(native(stream), static_cast<std::int64_t>(table.size()),
                                 device_table.as<AdamWMultiEntry>(), blocks, params, e, grad_norm);
  });
}

}  // namespace wf::kernels::cuda
