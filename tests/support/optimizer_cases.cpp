// The optimizer's shared parameters and gradients (tests/support/optimizer_cases.h).
#include "support/optimizer_cases.h"

#include "wallfacer/train/optimizer.h"

namespace wf::parity {

std::vector<Tensor> make_params(Device device) {
  std::vector<Tensor> params = {Tensor::randn_at({5, 7}, 11, 0, DType::f32), Tensor::randn_at({7}, 11, 100, DType::f32),
                                Tensor::randn_at({3, 4}, 11, 200, DType::f64),
                                Tensor::randn_at({6}, 11, 300, DType::f64)};
  for (Tensor& p : params) {
    p = p.to(device);
    p.set_requires_grad(true);
  }
  return params;
}

void set_grads(std::vector<Tensor>& params, int step, Device device, double scale) {
  for (std::size_t i = 0; i + 1 < params.size(); ++i) {  // the last one has none
    const Tensor g = Tensor::randn_at(params[i].shape(), 23 + step, 1000 * i, params[i].dtype());
    params[i].set_grad(g.to(device));
    train::scale_gradients({params[i]}, scale);
  }
}

}  // namespace wf::parity
