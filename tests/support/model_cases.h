#pragma once
// Tiny GPT, LLaMA and DiT models on a fixed batch, with parameters and inputs on any device:
// tests/models/test_models_on_test_device.cpp (the test device, bit for bit) and
// tests/cuda/test_models_on_cuda.cpp (a GPU, within tolerances) share them.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "wallfacer/core/tensor.h"
#include "wallfacer/models/decoder.h"
#include "wallfacer/models/diffusion.h"
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
// every parameter's gradient by name. `packed`: the rows pack documents (positions per row and
// document bounds).
std::map<std::string, Tensor> decoder_loss(models::DecoderLM& model, Device device, bool packed = false);

// A tiny DiT (learn_sigma, DDPM) on the CPU, with nonzero modulations and head: the published
// init zeroes them, and with them most gradients.
std::unique_ptr<models::Dit> tiny_dit();

// tiny_dit()'s loss sum ("loss") on a fixed batch with parameters and batch moved to `device`
// and, when `backward`, every parameter's gradient by name.
std::map<std::string, Tensor> dit_loss(models::Dit& model, Device device, bool backward);

// ---- the models' own arithmetic ---------------------------------------------------------------

// The sinusoidal embedding (width 256) of four timesteps, computed on `device`.
Tensor timestep_embedding_on(Device device);

// Rows 8, 0 and 4 of a [2, 9, 4] tensor (nn::select_rows), selected on `device`.
Tensor selected_rows_on(Device device);

// Diffusion's arithmetic for `kind` (DDPM with learn_sigma and times 0, 1, 999, or flow with
// 0, 0.5, 0.97) over a [3, 2, 4, 4] batch on `device`: x_t from noising (times as a tensor and as
// host values), the model's times, the loss sum with L_vb, and the loss again with the prediction
// (and variance) as leaves, then their gradients (zeros({1}) in place of the variance's for flow).
struct DiffusionRun {
  Tensor x_t, x_t_host_times, model_times, loss;
  std::vector<Tensor> loss_and_grads;
};
DiffusionRun diffusion_run(models::DiffusionKind kind, Device device);

// Four DDIM steps with clipping from fixed noise on `device`, by a denoiser that overshoots (so the
// clamp to [−1, 1] bites).
Tensor ddim_sample_on(Device device);

}  // namespace wf::parity
