#pragma once
// Dropout: inverted dropout while training, the identity in eval mode. Masks come from the
// default generator, whose state activation checkpointing saves and replays.
#include "wallfacer/nn/module.h"

namespace wf::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.0);
  Tensor forward(const Tensor& x);
  double p() const { return p_; }

 private:
  double p_;
};

}  // namespace wf::nn
