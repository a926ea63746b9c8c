#pragma once
// Tiny GPT, LLaMA and DiT models on a fixed batch, with parameters and inputs on any device:
// tests/models/test_models_on_test_device.cpp (the test device, bit for bit) and
// tests/cuda/test_models_on_cuda.cpp (a GPU, within tolerances) share them.
#include <map>
#include <memory>
#include <string>

#include "wallfacer/core/tensor.h"
#include "wallfacer/models/decoder.h"
#include "wallfacer/models/dit.h"
#include "wallfacer/nn/module.h"

namespace wf::parity {

// Moves every parameter and buffer of `module` to `device` in place (the handles stay valid).
void move_module(nn::Module& module, Device device);

// A tiny decoder, "gpt" (learned positions, tied embeddings) or "llama" (RoPE, GQA, SwiGLU),
// built on the CPU from a fixed seed.
std::unique_ptr<models::DecoderLM> tiny_decoder(const std::string& kind);

// The logits of a fixed [2, 8] batch with `model`'s parameters moved to `device`.
Tensor decoder_logits(models::DecoderLM& model, Device device);

// A decoder's loss sum ("loss") on a fixed batch with parameters and batch moved to `device`, and
// every parameter's gradient by name.
std::map<std::string, Tensor> decoder_loss(models::DecoderLM& model, Device device);

// A tiny DiT (learn_sigma, DDPM) on the CPU, with nonzero modulations and head: the published
// init zeroes them, and with them most gradients.
std::unique_ptr<models::Dit> tiny_dit();

// tiny_dit()'s loss sum ("loss") on a fixed batch with parameters and batch moved to `device`
// and, when `backward`, every parameter's gradient by name.
std::map<std::string, Tensor> dit_loss(models::Dit& model, Device device, bool backward);

}  // namespace wf::parity
