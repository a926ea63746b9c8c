#include "wallfacer/nn/mlp.h"

#include "wallfacer/ops/activation.h"
#include "wallfacer/ops/arithmetic.h"

namespace wf::nn {
namespace {

// d_ff resolved (0 → 4·d_model) after checking the sizes; `who` names the layer in messages.
MLPOptions resolved(MLPOptions options, const char* who) {
  WF_CHECK(options.d_model > 0 && options.d_ff >= 0, "{}: d_model must be positive and d_ff >= 0, got {} and {}", who,
           options.d_model, options.d_ff);
  if (options.d_ff == 0) options.d_ff = 4 * options.d_model;
  return options;
}

// One projection of a feed-forward: `in` → `out` features, built by the options' factory with
// its tensor-parallel role, seeded from the parent's stream under `name`.
std::shared_ptr<Linear> projection(Module& parent, const MLPOptions& o, const char* name, std::int64_t in,
                                   std::int64_t out, double std, LinearRole role) {
  return parent.register_module(
      name, layers_or_default(o.layers).linear(
                LinearOptions{.in_features = in, .out_features = out, .bias = o.bias, .init_std = std,
                              .weight_init = o.weight_init, .seed = parent.child_seed(name)},
                role));
}

// The dropout on the block's output, which is in the residual stream.
std::shared_ptr<Dropout> residual_dropout(const MLPOptions& o) {
  return layers_or_default(o.layers).dropout(o.dropout, ActivationRegion::replicated);
}

double out_std(const MLPOptions& o) { return o.out_init_std > 0 ? o.out_init_std : o.init_std; }

// residual + dropout(projection(hidden)): the residual added inside the projection (one linear_add
// node, Linear::forward_add) when the dropout between them is the identity, else the composition.
Tensor project_add(Linear& projection, Dropout& dropout, const Tensor& hidden, const Tensor& residual) {
  if (dropout.is_identity()) return projection.forward_add(hidden, residual);
  return add(residual, dropout.forward(projection.forward(hidden)));
}

}  // namespace

const char* activation_name(Activation activation) {
  switch (activation) {
    case Activation::gelu: return "gelu";
    case Activation::silu: return "silu";
  }
  return "unknown";
}

Tensor activate(Activation activation, const Tensor& x) {
  switch (activation) {
    case Activation::gelu: return gelu(x);
    case Activation::silu: return silu(x);
  }
  WF_FAIL("activate: unknown activation {}", static_cast<int>(activation));
}

MLP::MLP(const MLPOptions& options) : FeedForward(options.seed), options_(resolved(options, "MLP")) {
  const auto& o = options_;
  fc_ = projection(*this, o, "fc", o.d_model, o.d_ff, o.init_std, LinearRole::column);
  proj_ = projection(*this, o, "proj", o.d_ff, o.d_model, out_std(o), LinearRole::row);
  dropout_ = register_module("dropout", residual_dropout(o));
}

Tensor FeedForward::forward_add(const Tensor& x, const Tensor& residual) { return add(residual, forward(x)); }

Tensor MLP::hidden(const Tensor& x) {
  // GELU after fc is one op where the layer has one (Linear::forward_gelu): a backend may fuse it into the GEMM.
  return options_.activation == Activation::gelu ? fc_->forward_gelu(x)
                                                 : activate(options_.activation, fc_->forward(x));
}

Tensor MLP::forward(const Tensor& x) { return dropout_->forward(proj_->forward(hidden(x))); }

Tensor MLP::forward_add(const Tensor& x, const Tensor& residual) {
  return project_add(*proj_, *dropout_, hidden(x), residual);
}

SwiGLU::SwiGLU(const MLPOptions& options) : FeedForward(options.seed), options_(resolved(options, "SwiGLU")) {
  const auto& o = options_;
  gate_ = projection(*this, o, "gate", o.d_model, o.d_ff, o.init_std, LinearRole::column);
  up_ = projection(*this, o, "up", o.d_model, o.d_ff, o.init_std, LinearRole::column);
  down_ = projection(*this, o, "down", o.d_ff, o.d_model, out_std(o), LinearRole::row);
  dropout_ = register_module("dropout", residual_dropout(o));
}

Tensor SwiGLU::hidden(const Tensor& x) { return mul(silu(gate_->forward(x)), up_->forward(x)); }

Tensor SwiGLU::forward(const Tensor& x) { return dropout_->forward(down_->forward(hidden(x))); }

Tensor SwiGLU::forward_add(const Tensor& x, const Tensor& residual) {
  return project_add(*down_, *dropout_, hidden(x), residual);
}

}  // namespace wf::nn
