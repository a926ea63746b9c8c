#pragma once
// DiT, the diffusion transformer (Peebles & Xie 2023; facebookresearch/DiT models.py):
//
//   images [B, C, H, W] (or videos [B, F, C, H, W]) → p×p patches, row-major, N = F·(H/p)·(W/p)
//   → x_embedder Linear(C·p·p → d) (a Conv2d(C, d, p, stride p): patch vectors ordered (c, i, j))
//     + fixed sin-cos positions (2-D; 3-D for video, nn/sincos_position.h)
//   c = t_embedder(t) + y_embedder(label)        (timestep MLP; class table with a null class
//                                                 for classifier-free guidance)
//   → n_layer nn::AdaLNZeroBlocks(x, c)           (full attention through the run's strategy)
//   → final layer: adaLN (shift, scale) → modulate(LayerNorm(x)) → Linear(d → p·p·C_out)
//   → unpatchify (outputs per patch ordered (i, j, c))  [B, C_out, H, W], C_out = 2C with learn_sigma
//
// Training (loss_sum) runs a diffusion process (models/diffusion.h) on a batch of "images",
// "noise", "times" (one per sample) and "labels" (after the label dropout), drawn by the batch
// source at each sample's global index so any layout trains on the same numbers
// (models/dit_batches.h). Under sequence parallelism a rank patchifies the whole (small) image
// and keeps its patches ("positions": their global indices, contiguous runs), so the model, the
// target and the loss see only this rank's part; the loss is a sum with its element count.
//
// Initialisation as published: Xavier-uniform linears (x_embedder on its [d, C·p·p] view),
// normal(0.02) for the class table and the timestep MLP, zero adaLN modulations and a zero final
// linear (a fresh model predicts 0, and every block is the identity).
//
// Pipeline stages: a stage's hidden states carry the conditioning c as one extra row in front of
// the patches ([B, 1 + n_local, d]), so later stages need neither the embedders nor the batch's
// times and labels.
#include <cstdint>
#include <memory>
#include <vector>

#include "wallfacer/models/decoder.h"
#include "wallfacer/models/diffusion.h"
#include "wallfacer/models/model.h"
#include "wallfacer/nn/adaln.h"
#include "wallfacer/nn/embedding.h"
#include "wallfacer/nn/timestep_embedder.h"

namespace wf::models {

struct DitOptions {
  std::int64_t image_size = 32;  // H = W (square images)
  std::int64_t in_channels = 1;
  std::int64_t patch_size = 2;
  std::int64_t frames = 1;  // > 1: video, 3-D positions
  std::int64_t d_model = 384;
  std::int64_t n_layer = 12;
  std::int64_t n_head = 6;
  double mlp_ratio = 4.0;
  std::int64_t num_classes = 10;
  double class_dropout = 0.1;  // > 0: the class table has a null class (index num_classes)
  bool learn_sigma = false;
  DiffusionKind diffusion = DiffusionKind::ddpm;
  std::int64_t num_timesteps = 1000;
  double beta_start = 1e-4;
  double beta_end = 0.02;
  bool checkpoint_attention = false;
  std::uint64_t seed = 0;
  StageRange stage = {};
  std::shared_ptr<const nn::LayerFactory> layers = nullptr;

  std::int64_t grid() const { return image_size / patch_size; }        // patches per row
  std::int64_t num_patches() const { return frames * grid() * grid(); }  // N
  std::int64_t out_channels() const { return learn_sigma ? 2 * in_channels : in_channels; }
  std::int64_t d_ff() const { return static_cast<std::int64_t>(static_cast<double>(d_model) * mlp_ratio); }
  DiffusionOptions diffusion_options() const {
    return {.kind = diffusion, .num_timesteps = num_timesteps, .beta_start = beta_start, .beta_end = beta_end,
            .learn_sigma = learn_sigma};
  }
};

const config::ModelKeys<DitOptions>& dit_keys();
DitOptions dit_options(const config::RunConfig& config);
double dit_parameter_count(const DitOptions& options);
double dit_train_flops_per_token(const DitOptions& options);
// The rules, against the layout too ("model.key: rule; the fix" lines).
void check_dit(const DitOptions& options, const config::RunConfig& config, std::vector<std::string>& problems);

// Patch sequences of an image batch (no grad): x [B, C, H, W] or [B, F, C, H, W] →
// [B, N, C·p·p] with each patch's values ordered (c, i, j) (the patch embedding's input), or with
// `pixel_major` ordered (i, j, c) (the final layer's output order).
Tensor patchify(const Tensor& x, std::int64_t patch, std::int64_t frames, bool pixel_major);
// The inverse of patchify(·, pixel_major = true) for the model's output: [B, N, p·p·C] → [B, C, H, W]
// (or [B, F, C, H, W] when frames > 1). Differentiable.
Tensor unpatchify(const Tensor& y, std::int64_t patch, std::int64_t frames, std::int64_t grid, std::int64_t channels);

class Dit : public Model {
 public:
  explicit Dit(const DitOptions& options);

  // The whole model on whole images: x_t [B, C, H, W] (or [B, F, C, H, W]), model times [B]
  // (what the timestep embedder sees), labels [B] i64 → [B, C_out, H, W] (or [B, F, C_out, H, W]).
  Tensor forward(const Tensor& x_t, const Tensor& model_times, const Tensor& labels);
  // This rank's patches: tokens [B, n, C·p·p] (patchify order) at `positions` → [B, n, p·p·C_out].
  Tensor forward_tokens(const Tensor& tokens, const Tensor& model_times, const Tensor& labels, const Tensor& positions);

  std::string name() const override { return "dit"; }
  LossSum loss_sum(const Batch& batch) override;
  double train_flops_per_token(std::int64_t seq_len) const override;
  bool causal() const override { return false; }
  StageRange stage() const override { return options_.stage; }
  StageOutput forward_stage(const Batch& batch, const Tensor& hidden, int chunk = 0) override;
  std::pair<Shape, DType> stage_hidden(const Batch& batch) const override;

  const DitOptions& options() const { return options_; }
  const Diffusion& diffusion() const { return diffusion_; }
  std::size_t num_blocks() const { return blocks_.size(); }
  nn::AdaLNZeroBlock& block(std::size_t i) { return *blocks_.at(i); }

 private:
  // [B, n, d] patch embeddings (+ positions) and the conditioning c [B, d].
  std::pair<Tensor, Tensor> embed(const Tensor& tokens, const Tensor& model_times, const Tensor& labels,
                                  const Tensor& positions);
  Tensor run_blocks(Tensor x, const Tensor& c, const Tensor& positions, int chunk);
  // The training inputs of a batch: x_t, target, x0 patch sequences at this rank's positions.
  struct Noised {
    Tensor tokens;   // [B, n, C·p·p] x_t in patchify order (the model's input)
    Tensor target;     // [B, n, p·p, C] in the output order
    Tensor x0, x_t;    // the same; with learn_sigma only (the bound's posterior)
    Tensor times;      // [B] f64 on the batch's device
  };
  Noised noised_inputs(const Batch& batch) const;
  LossSum loss_of(const Tensor& out, const Noised& inputs) const;

  DitOptions options_;
  Diffusion diffusion_;
  Tensor pos_table_;  // [N, d] f32 constant, built on the host, on the device of the positions last seen
  std::shared_ptr<nn::Linear> x_embedder_;
  std::shared_ptr<nn::TimestepEmbedder> t_embedder_;
  std::shared_ptr<nn::Embedding> y_embedder_;
  std::vector<std::shared_ptr<nn::AdaLNZeroBlock>> blocks_;
  std::vector<std::size_t> chunk_begin_;
  std::shared_ptr<nn::AdaLNFinalLayer> final_layer_;
};

std::shared_ptr<Model> make_dit(const config::RunConfig& config, comm::CommGrid& grid);

// DiT's blocks in the terms of a decoder's options (layers, heads, d_model, the MLP's width, the
// checkpoint): what the communication formulas need of them (train/step_traffic.h).
DecoderOptions dit_block_shape(const DitOptions& options);

// Class-conditional sampling with classifier-free guidance (DiT's forward_with_cfg): each step
// runs the model on the batch twice over, with the labels and with the null class, and predicts
// uncond + guidance·(cond − uncond) (the variance channels of learn_sigma are not used: DDIM
// with η = 0 and Euler need none). guidance 1 is the conditional model alone and needs no null
// class. One process, no grad. Images [n, C, H, W] (or [n, F, C, H, W]) in about [−1, 1].
struct DitSampleOptions {
  std::vector<std::int64_t> labels;  // one image per label
  double guidance = 4.0;
  std::int64_t steps = 50;   // DDIM (ddpm) or Euler (flow) steps
  std::uint64_t seed = 0;    // the initial noise
  // ddpm: clamp each step's x̂₀ to the data's [−1, 1] (pixel images from data/idx_images.h; off
  // for unbounded inputs such as VAE latents, as DiT samples them).
  bool clip = true;
};
Tensor sample_dit(Dit& model, const DitSampleOptions& options);

}  // namespace wf::models
