#pragma once
// The transformer feed-forward, behind one interface so a block takes whichever a model uses:
//  - MLP:    fc (d_model → d_ff) → activation → proj (d_ff → d_model) → dropout   (GPT-2)
//  - SwiGLU: down(silu(gate(x)) ⊙ up(x)) → dropout, gate/up d_model → d_ff, down d_ff → d_model
//            (LLaMA, PaLM; Shazeer 2020)
//  - a user's FeedForward subclass, through TransformerBlockOptions::make_feed_forward.
// Every weight comes from the options' LayerFactory with its role (fc, gate, up: column; proj,
// down: row), so a tensor-parallel factory splits any of them the Megatron way.
#include <cstdint>
#include <memory>

#include "wallfacer/nn/dropout.h"
#include "wallfacer/nn/layer_factory.h"
#include "wallfacer/nn/linear.h"

namespace wf::nn {

enum class Activation { gelu, silu };
const char* activation_name(Activation activation);
// Applies the activation (differentiable).
Tensor activate(Activation activation, const Tensor& x);

// A module mapping [..., d_model] to [..., d_model].
class FeedForward : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& x) = 0;
  // residual + forward(x) (the block's residual add after it). By default that composition; MLP
  // and SwiGLU add the residual inside their output projection (Linear::forward_add) while their
  // dropout is the identity, which a backend may fuse into the GEMM's epilogue.
  virtual Tensor forward_add(const Tensor& x, const Tensor& residual);
};

struct MLPOptions {
  std::int64_t d_model = 0;
  std::int64_t d_ff = 0;  // 0 → 4·d_model
  Activation activation = Activation::gelu;
  double dropout = 0.0;
  bool bias = true;
  double init_std = 0.02;
  // Init std of the output projection, which writes into the residual stream; GPT-2 uses
  // 0.02/√(2·n_layer). 0 → init_std.
  double out_init_std = 0.0;
  WeightInit weight_init = WeightInit::normal;  // xavier_uniform ignores the stds (DiT)
  std::uint64_t seed = 0;
  std::shared_ptr<const LayerFactory> layers = nullptr;  // null: the plain layers
};

class MLP : public FeedForward {
 public:
  explicit MLP(const MLPOptions& options);
  // x [..., d_model] → [..., d_model]
  Tensor forward(const Tensor& x) override;
  Tensor forward_add(const Tensor& x, const Tensor& residual) override;

  Linear& fc() { return *fc_; }
  Linear& proj() { return *proj_; }
  const MLPOptions& options() const { return options_; }

 private:
  MLPOptions options_;
  std::shared_ptr<Linear> fc_;
  std::shared_ptr<Linear> proj_;
  std::shared_ptr<Dropout> dropout_;

  Tensor hidden(const Tensor& x);  // the activation after fc: proj's input
};

// Gated linear unit with SiLU: weights gate, up [d_ff, d_model] and down [d_model, d_ff]. Takes
// MLPOptions (activation is ignored: always SiLU on the gate; init_std for gate and up,
// out_init_std for down).
class SwiGLU : public FeedForward {
 public:
  explicit SwiGLU(const MLPOptions& options);
  Tensor forward(const Tensor& x) override;
  Tensor forward_add(const Tensor& x, const Tensor& residual) override;

  Linear& gate() { return *gate_; }
  Linear& up() { return *up_; }
  Linear& down() { return *down_; }
  const MLPOptions& options() const { return options_; }

 private:
  MLPOptions options_;
  std::shared_ptr<Linear> gate_;
  std::shared_ptr<Linear> up_;
  std::shared_ptr<Linear> down_;
  std::shared_ptr<Dropout> dropout_;

  Tensor hidden(const Tensor& x);  // silu(gate(x)) ⊙ up(x): down's input
};

}  // namespace wf::nn
