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

 protected:
  // The training-mode dropout of x (p > 0): wf::dropout from the default generator.
  virtual Tensor drop(const Tensor& x) const;

 private:
  double p_;
};

}  // namespace wf::nn
