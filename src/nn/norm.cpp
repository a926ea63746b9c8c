#include "wallfacer/nn/norm.h"

#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/norm.h"

namespace wf::nn {
namespace {

void check_norm_input(const char* who, std::int64_t dim, const Tensor& x) {
  WF_CHECK(x.dim() >= 1 && x.size(-1) == dim, "{}(dim={}): input of shape {} must end in {} features", who, dim,
           shape_str(x.shape()), dim);
}

void check_norm_options(const char* who, std::int64_t dim, double eps) {
  WF_CHECK(dim > 0, "{}: dim must be positive, got {}", who, dim);
  WF_CHECK(eps > 0.0, "{}: eps must be positive, got {}", who, eps);
}

}  // namespace

AddNorm Normalization::forward_add(const Tensor& x, const Tensor& branch) {
  Tensor sum = add(x, branch);
  Tensor y = forward(sum);
  return {std::move(sum), std::move(y)};
}

LayerNorm::LayerNorm(const LayerNormOptions& options) : options_(options) {
  check_norm_options("LayerNorm", options.dim, options.eps);
  if (options.affine) {
    weight_ = register_parameter("weight", Tensor::ones({options.dim}));
    bias_ = register_parameter("bias", Tensor::zeros({options.dim}));
  }
}

LayerNorm::LayerNorm(std::int64_t dim, double eps, bool affine)
    : LayerNorm(LayerNormOptions{.dim = dim, .eps = eps, .affine = affine}) {}

std::pair<Tensor, Tensor> LayerNorm::affine_for(const Tensor& x) const {
  if (options_.affine) return {in_compute_dtype(weight_), in_compute_dtype(bias_)};
  // Constant unit scale and zero shift: they need no gradient and are cheap to make.
  return {Tensor::ones({options_.dim}, x.dtype(), x.device()), Tensor::zeros({options_.dim}, x.dtype(), x.device())};
}

Tensor LayerNorm::forward(const Tensor& x) {
  check_norm_input("LayerNorm", options_.dim, x);
  const auto [weight, bias] = affine_for(x);
  return layer_norm(x, weight, bias, options_.eps);
}

AddNorm LayerNorm::forward_add(const Tensor& x, const Tensor& branch) {
  check_norm_input("LayerNorm", options_.dim, x);
  const auto [weight, bias] = affine_for(x);
  return add_layer_norm(x, branch, weight, bias, options_.eps);
}

RMSNorm::RMSNorm(const RMSNormOptions& options) : options_(options) {
  check_norm_options("RMSNorm", options.dim, options.eps);
  weight_ = register_parameter("weight", Tensor::ones({options.dim}));
}

RMSNorm::RMSNorm(std::int64_t dim, double eps) : RMSNorm(RMSNormOptions{.dim = dim, .eps = eps}) {}

Tensor RMSNorm::forward(const Tensor& x) {
  check_norm_input("RMSNorm", options_.dim, x);
  return rms_norm(x, in_compute_dtype(weight_), options_.eps);
}

AddNorm RMSNorm::forward_add(const Tensor& x, const Tensor& branch) {
  check_norm_input("RMSNorm", options_.dim, x);
  return add_rms_norm(x, branch, in_compute_dtype(weight_), options_.eps);
}

const char* norm_type_name(NormType type) {
  switch (type) {
    case NormType::layer_norm: return "layer_norm";
    case NormType::rms_norm: return "rms_norm";
  }
  return "unknown";
}

std::shared_ptr<Normalization> make_norm(NormType type, std::int64_t dim, double eps) {
  switch (type) {
    case NormType::layer_norm: return std::make_shared<LayerNorm>(dim, eps);
    case NormType::rms_norm: return std::make_shared<RMSNorm>(dim, eps);
  }
  WF_FAIL("make_norm: unknown norm type {}", static_cast<int>(type));
}

double norm_parameter_count(NormType type, std::int64_t dim) {
  return (type == NormType::layer_norm ? 2.0 : 1.0) * static_cast<double>(dim);
}

}  // namespace wf::nn
