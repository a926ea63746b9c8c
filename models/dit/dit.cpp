// DiT: the model (include/wallfacer/models/dit.h). Its keys and registration are in dit_config.cpp.
#include "wallfacer/models/dit.h"


#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/nn/sincos_position.h"
#include "wallfacer/ops/ops.h"

namespace wf::models {
namespace {

// x [B, C, H, W] or [B, F, C, H, W] as [B, F, C, h, p, w, p].
Tensor patch_view(const Tensor& x, std::int64_t patch, std::int64_t frames) {
  const bool video = frames > 1;
  WF_CHECK(x.dim() == (video ? 5 : 4), "DiT: images must be [batch, {}channels, height, width], got {}",
           video ? "frames, " : "", shape_str(x.shape()));
  const std::int64_t d = x.dim();
  const std::int64_t B = x.size(0), C = x.size(d - 3), H = x.size(d - 2), W = x.size(d - 1);
  WF_CHECK(!video || x.size(1) == frames, "DiT: expected {} frames, got {}", frames, shape_str(x.shape()));
  WF_CHECK(H % patch == 0 && W % patch == 0, "DiT: image {}x{} is not a whole number of {}x{} patches", H, W, patch,
           patch);
  return reshape(x, {B, frames, C, H / patch, patch, W / patch, patch});
}

}  // namespace

Tensor patchify(const Tensor& x, std::int64_t patch, std::int64_t frames, bool pixel_major) {
  autograd::NoGradGuard no_grad;
  const Tensor v = patch_view(x, patch, frames);  // [B, F, C, h, p, w, p]
  const std::int64_t B = v.size(0), C = v.size(2), h = v.size(3), w = v.size(5);
  // (c, i, j): [B, F, h, w, C, p, p];  (i, j, c): [B, F, h, w, p, p, C].
  const Tensor p = pixel_major ? permute(v, {0, 1, 3, 5, 4, 6, 2}) : permute(v, {0, 1, 3, 5, 2, 4, 6});
  return reshape(p, {B, frames * h * w, C * patch * patch});
}

Tensor unpatchify(const Tensor& y, std::int64_t patch, std::int64_t frames, std::int64_t grid, std::int64_t channels) {
  WF_CHECK(y.dim() == 3 && y.size(1) == frames * grid * grid && y.size(2) == patch * patch * channels,
           "DiT unpatchify: expected [batch, {}, {}], got {}", frames * grid * grid, patch * patch * channels,
           shape_str(y.shape()));
  const std::int64_t B = y.size(0);
  // [B, F, h, w, p, p, C] → [B, F, C, h, p, w, p] (DiT's einsum 'nhwpqc->nchpwq').
  const Tensor v = permute(reshape(y, {B, frames, grid, grid, patch, patch, channels}), {0, 1, 6, 2, 4, 3, 5});
  if (frames == 1) return reshape(v, {B, channels, grid * patch, grid * patch});
  return reshape(v, {B, frames, channels, grid * patch, grid * patch});
}

Dit::Dit(const DitOptions& options) : Model(options.seed), options_(options), diffusion_(options.diffusion_options()) {
  const DitOptions& o = options_;
  WF_CHECK(o.patch_size > 0 && o.image_size > 0 && o.image_size % o.patch_size == 0 && o.frames > 0,
           "DiT: image_size {} must be a positive multiple of patch_size {}", o.image_size, o.patch_size);
  WF_CHECK(o.d_model > 0 && o.d_model % 4 == 0 && o.n_head > 0 && o.d_model % o.n_head == 0,
           "DiT: d_model {} must be a multiple of 4 (2-D sin-cos positions) and of n_head {}", o.d_model, o.n_head);
  WF_CHECK(o.num_classes > 0 && o.in_channels > 0, "DiT: num_classes and in_channels must be positive");
  const StageRange& s = o.stage;
  const nn::LayerFactory& layers = nn::layers_or_default(o.layers);
  pos_table_ = nn::sincos_3d(o.d_model, o.frames, o.grid(), o.grid());
  if (s.embedding) {
    x_embedder_ = register_module(
        "x_embedder", layers.linear(nn::LinearOptions{.in_features = o.in_channels * o.patch_size * o.patch_size,
                                                      .out_features = o.d_model,
                                                      .weight_init = nn::WeightInit::xavier_uniform,
                                                      .seed = child_seed("x_embedder")},
                                    nn::LinearRole::replicated));
    t_embedder_ = register_module("t_embedder", std::make_shared<nn::TimestepEmbedder>(nn::TimestepEmbedderOptions{
                                                    .d_model = o.d_model, .seed = child_seed("t_embedder"),
                                                    .layers = o.layers}));
    const std::int64_t rows = o.num_classes + (o.class_dropout > 0 ? 1 : 0);
    y_embedder_ = register_module(
        "y_embedder", layers.embedding(nn::EmbeddingOptions{.num_embeddings = rows, .dim = o.d_model,
                                                            .init_std = 0.02, .seed = child_seed("y_embedder")},
                                       nn::EmbeddingRole::replicated));
  }
  auto blocks = register_module("blocks", std::make_shared<nn::ModuleList>(child_seed("blocks")));
  for (const BlockRange& chunk : s.chunks) {
    chunk_begin_.push_back(blocks_.size());
    const std::int64_t end = chunk.end < 0 ? o.n_layer : chunk.end;
    WF_CHECK(0 <= chunk.first && chunk.first <= end && end <= o.n_layer, "DiT: blocks [{}, {}) are not inside its {}",
             chunk.first, end, o.n_layer);
    for (std::int64_t i = chunk.first; i < end; ++i) {
      blocks_.push_back(blocks->place(i, std::make_shared<nn::AdaLNZeroBlock>(nn::AdaLNZeroBlockOptions{
                                             .d_model = o.d_model,
                                             .n_head = o.n_head,
                                             .d_ff = o.d_ff(),
                                             .checkpoint_attention = o.checkpoint_attention,
                                             .seed = blocks->seed_at(i),
                                             .layers = o.layers})));
    }
  }
  chunk_begin_.push_back(blocks_.size());
  if (s.head) {
    final_layer_ = register_module("final_layer", std::make_shared<nn::AdaLNFinalLayer>(nn::AdaLNFinalLayerOptions{
                                                      .d_model = o.d_model,
                                                      .out_features = o.patch_size * o.patch_size * o.out_channels(),
                                                      .seed = child_seed("final_layer"),
                                                      .layers = o.layers}));
  }
}

std::pair<Tensor, Tensor> Dit::embed(const Tensor& tokens, const Tensor& model_times, const Tensor& labels,
                                     const Tensor& positions) {
  WF_CHECK(labels.dim() == 1 && labels.dtype() == DType::i64 && labels.size(0) == tokens.size(0),
           "DiT: labels must be [batch = {}] i64, got {} {}", tokens.size(0), dtype_name(labels.dtype()),
           shape_str(labels.shape()));
  // The inputs enter in the dtype the layers compute in (bf16 under mixed precision, f64 in tests).
  const DType compute = compute_dtype(x_embedder_->weight().dtype());
  Tensor x = x_embedder_->forward(tokens.to(compute));
  // The table is built on the host; it follows the positions to their device once.
  if (pos_table_.device() != positions.device()) pos_table_ = pos_table_.to(positions.device());
  const Tensor pos = nn::select_rows(pos_table_, positions);
  x = add(x, pos.dtype() == x.dtype() ? pos : pos.to(x.dtype()));  // [B, n, d] + [n, d]
  const Tensor c = add(t_embedder_->forward(model_times), y_embedder_->forward(labels));
  return {x, c};
}

Tensor Dit::run_blocks(Tensor x, const Tensor& c, const Tensor& positions, int chunk) {
  const auto k = static_cast<std::size_t>(chunk);
  for (std::size_t i = chunk_begin_[k]; i < chunk_begin_[k + 1]; ++i) x = blocks_[i]->forward(x, c, positions);
  return x;
}

Tensor Dit::forward_tokens(const Tensor& tokens, const Tensor& model_times, const Tensor& labels,
                           const Tensor& positions) {
  WF_CHECK(options_.stage.whole(options_.n_layer), "DiT: forward needs the whole model; this instance is a stage");
  const auto [x, c] = embed(tokens, model_times, labels, positions);
  return final_layer_->forward(run_blocks(x, c, positions, 0), c);
}

Tensor Dit::forward(const Tensor& x_t, const Tensor& model_times, const Tensor& labels) {
  const DitOptions& o = options_;
  const Tensor positions =
      Tensor::arange(0.0, static_cast<double>(o.num_patches()), 1.0, DType::i64).to(x_t.device());  // every patch
  const Tensor out = forward_tokens(patchify(x_t, o.patch_size, o.frames, false), model_times, labels, positions);
  return unpatchify(out, o.patch_size, o.frames, o.grid(), o.out_channels());
}

Dit::Noised Dit::noised_inputs(const Batch& batch) const {
  const DitOptions& o = options_;
  const Tensor& images = batch.at("images");
  const Tensor& positions = batch.at("positions");
  Noised in;
  in.times = batch.at("times").to(DType::f64);
  const Tensor& noise = batch.at("noise");
  const Tensor x_t = diffusion_.noised(images, noise, in.times);
  in.tokens = nn::select_rows(patchify(x_t, o.patch_size, o.frames, false), positions);
  // Targets in the final layer's output order, as [B, n, p·p, C].
  const auto output_order = [&](const Tensor& image) {
    const Tensor t = nn::select_rows(patchify(image, o.patch_size, o.frames, true), positions);
    return reshape(t, {t.size(0), t.size(1), o.patch_size * o.patch_size, o.in_channels});
  };
  in.target = output_order(diffusion_.target(images, noise));
  if (o.learn_sigma) {  // the variational bound's posterior needs them
    in.x0 = output_order(images);
    in.x_t = output_order(x_t);
  }
  return in;
}

LossSum Dit::loss_of(const Tensor& out, const Noised& in) const {
  const DitOptions& o = options_;
  // The loss in the masters' dtype whatever the compute dtype (nn/precision.h): f32 under bf16.
  const DType master = parameters().back().dtype();
  const Tensor y = out.dtype() == master ? out : cast(out, master);
  const Tensor per_pixel = reshape(y, {y.size(0), y.size(1), o.patch_size * o.patch_size, o.out_channels()});
  const Tensor prediction = o.learn_sigma ? narrow(per_pixel, 3, 0, o.in_channels) : per_pixel;
  const Tensor variance = o.learn_sigma ? narrow(per_pixel, 3, o.in_channels, o.in_channels) : Tensor();
  return {diffusion_.loss_sum(prediction, variance, in.target.to(master), in.x0, in.x_t, in.times),
          in.target.numel()};
}

StageOutput Dit::forward_stage(const Batch& batch, const Tensor& hidden, int chunk) {
  const StageRange& stage = options_.stage;
  WF_CHECK(chunk >= 0 && chunk < stage.num_chunks(), "DiT: this stage holds model chunks 0..{}, not {}",
           stage.num_chunks() - 1, chunk);
  const bool first = stage.embedding && chunk == 0, last = stage.head && chunk + 1 == stage.num_chunks();
  const Tensor& positions = batch.at("positions");
  Noised in;
  Tensor x, c;
  if (first) {
    in = noised_inputs(batch);
    std::tie(x, c) = embed(in.tokens, diffusion_.model_times(in.times), batch.at("labels"), positions);
  } else {
    WF_CHECK(hidden.defined() && hidden.dim() == 3 && hidden.size(1) == positions.numel() + 1 &&
                 hidden.size(2) == options_.d_model,
             "DiT: a later stage continues from [batch, 1 + {} tokens, {}] (the conditioning, then the patches), got {}",
             positions.numel(), options_.d_model, hidden.defined() ? shape_str(hidden.shape()) : "none");
    c = reshape(narrow(hidden, 1, 0, 1), {hidden.size(0), options_.d_model});
    x = narrow(hidden, 1, 1, positions.numel());
  }
  x = run_blocks(std::move(x), c, positions, chunk);
  if (!last) return {cat({reshape(c, {c.size(0), 1, c.size(1)}), x}, 1), {}};
  if (!first) in = noised_inputs(batch);
  return {Tensor(), loss_of(final_layer_->forward(x, c), in)};
}

std::pair<Shape, DType> Dit::stage_hidden(const Batch& batch) const {
  const std::int64_t samples = batch.at("labels").size(0);
  return {{samples, 1 + batch.at("positions").numel(), options_.d_model},
          compute_dtype(parameters().front().dtype())};
}

LossSum Dit::loss_sum(const Batch& batch) {
  WF_CHECK(options_.stage.whole(options_.n_layer), "DiT: loss_sum needs the whole model; this is a stage (forward_stage)");
  return forward_stage(batch, Tensor()).loss;
}

double Dit::train_flops_per_token(std::int64_t /*seq_len*/) const { return dit_train_flops_per_token(options_); }

}  // namespace wf::models
