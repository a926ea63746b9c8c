#pragma once
// Dropout: inverted dropout while training, the identity in eval mode. Masks come from the
// default generator, whose state activation checkpointing saves and replays. Where the mask must
// be drawn otherwise (tensor parallelism: a slice of the tokens, or a per-rank stream) a
// subclass overrides drop(); LayerFactory::dropout chooses which.
#include "wallfacer/nn/module.h"

namespace wf::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.0);
  // x in eval mode or with p 0, else drop(x).
  Tensor forward(const Tensor& x);
  double p() const { return p_; }
  // Whether forward(x) is x itself now (eval mode, or p 0): then nothing sits between the op
  // before it and the op after it, which may be fused (FeedForward::forward_add).
  bool is_identity() const { return !is_training() || p_ == 0.0; }

 protected:
  // The training-mode dropout of x (p > 0): wf::dropout from the default generator.
  virtual Tensor drop(const Tensor& x) const;

 private:
  double p_;
};

}  // namespace wf::nn
