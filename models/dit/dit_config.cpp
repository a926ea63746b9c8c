// DiT's `model:` keys, its rules and counts, and its registration (model, schema, batches).
#include <fmt/format.h>

#include "wallfacer/models/dit.h"
#include "wallfacer/models/dit_batches.h"
#include "wallfacer/parallel/ulysses_heads.h"

namespace wf::models {
namespace {

config::ModelSchema dit_schema() {
  config::ModelSchema schema;
  schema.name = "dit";
  schema.keys = dit_keys().keys();
  schema.image_data = true;
  schema.validate = [](const config::RunConfig& c, std::vector<std::string>& problems) {
    check_dit(dit_options(c), c, problems);
  };
  schema.facts = [](const config::RunConfig& c) {
    const DitOptions o = dit_options(c);
    config::ModelFacts facts;
    facts.description = fmt::format("DiT {} layers, d_model {}, {} heads, {}x{} images in {}x{} patches ({} tokens{}), {}",
                                    o.n_layer, o.d_model, o.n_head, o.image_size, o.image_size, o.patch_size,
                                    o.patch_size, o.num_patches(), o.frames > 1 ? fmt::format(", {} frames", o.frames) : "",
                                    diffusion_kind_name(o.diffusion));
    facts.parameters = dit_parameter_count(o);
    facts.train_flops_per_token = dit_train_flops_per_token(o);
    facts.causal = false;
    facts.vocab_size = 0;
    facts.max_seq_len = o.num_patches();
    facts.n_layer = o.n_layer;
    // f32 values a block keeps without the checkpoint: norms, modulated inputs, q/k/v, the
    // attention output, the projection, the MLP hidden (twice) and the residuals; with it x and
    // the attention output.
    const double d = static_cast<double>(o.d_model), ff = static_cast<double>(o.d_ff());
    const double per_layer = o.checkpoint_attention ? 2 * d + static_cast<double>(o.n_head) : 10 * d + 3 * ff;
    facts.activation_bytes_per_token = 4.0 * (static_cast<double>(o.n_layer) * per_layer + 4 * d);
    // What tensor parallelism does not split: the d_model-wide values (all but q/k/v's heads and
    // the MLP hidden), and the embedders' and final layer's.
    const double replicated = o.checkpoint_attention ? 2 * d : 6 * d;
    facts.activation_bytes_per_token_tp_replicated = 4.0 * (static_cast<double>(o.n_layer) * replicated + 4 * d);
    // The final layer's width (patch² · channels) is small: no head term.
    facts.blocks = {.n_layer = o.n_layer, .n_head = o.n_head, .n_kv_head = o.n_head, .d_model = o.d_model,
                    .d_ff = o.d_ff(), .feed_forward_matrices = 2, .checkpoint_attention = o.checkpoint_attention,
                    .head_width = 0, .extra_rows = 1};
    return facts;
  };
  return schema;
}

const ModelRegistration kRegisterDit(dit_schema(), make_dit, make_dit_batches);

}  // namespace

const config::ModelKeys<DitOptions>& dit_keys() {
  static const auto keys = [] {
    const config::Choices<DiffusionKind> kDiffusions = {{"ddpm", DiffusionKind::ddpm}, {"flow", DiffusionKind::flow}};
    constexpr std::int64_t kMaxWidth = std::int64_t{1} << 40;
    config::ModelKeys<DitOptions> k;
    k.integer("image_size", &DitOptions::image_size, 1, 1 << 16)
        .integer("in_channels", &DitOptions::in_channels, 1, 64)
        .integer("patch_size", &DitOptions::patch_size, 1, 1 << 16)
        .integer("frames", &DitOptions::frames, 1, 1 << 16)
        .integer("d_model", &DitOptions::d_model, 4, kMaxWidth)
        .integer("n_layer", &DitOptions::n_layer, 1, 1 << 16)
        .integer("n_head", &DitOptions::n_head, 1, 1 << 20)
        .number("mlp_ratio", &DitOptions::mlp_ratio, 0.0, false, 64.0, true)
        .integer("num_classes", &DitOptions::num_classes, 1, 1 << 24)
        .number("class_dropout", &DitOptions::class_dropout, 0.0, true, 1.0, false)
        .boolean("learn_sigma", &DitOptions::learn_sigma)
        .choice("diffusion", &DitOptions::diffusion, kDiffusions)
        .integer("num_timesteps", &DitOptions::num_timesteps, 2, 1 << 20)
        .number("beta_start", &DitOptions::beta_start, 0.0, false, 1.0, false)
        .number("beta_end", &DitOptions::beta_end, 0.0, false, 1.0, false)
        .boolean("checkpoint_attention", &DitOptions::checkpoint_attention);
    return k;
  }();
  return keys;
}

DitOptions dit_options(const config::RunConfig& config) {
  DitOptions options = dit_keys().read(config.model);
  options.seed = static_cast<std::uint64_t>(config.train.seed);
  return options;
}

double dit_parameter_count(const DitOptions& o) {
  const double d = static_cast<double>(o.d_model), ff = static_cast<double>(o.d_ff());
  const double patch_in = static_cast<double>(o.in_channels * o.patch_size * o.patch_size);
  const double patch_out = static_cast<double>(o.patch_size * o.patch_size * o.out_channels());
  const double classes = static_cast<double>(o.num_classes + (o.class_dropout > 0 ? 1 : 0));
  const double embedders = patch_in * d + d + 256 * d + d + d * d + d + classes * d;
  const double block = (6 * d * d + 6 * d) + (3 * d * d + 3 * d) + (d * d + d) + (d * ff + ff) + (ff * d + d);
  const double final_layer = (2 * d * d + 2 * d) + (d * patch_out + patch_out);
  return embedders + static_cast<double>(o.n_layer) * block + final_layer;
}

double dit_train_flops_per_token(const DitOptions& o) {
  const double d = static_cast<double>(o.d_model), ff = static_cast<double>(o.d_ff());
  const double patch_in = static_cast<double>(o.in_channels * o.patch_size * o.patch_size);
  const double patch_out = static_cast<double>(o.patch_size * o.patch_size * o.out_channels());
  // 6 FLOPs per weight per token (forward + both backward products); attention QKᵀ and PV over
  // all N keys (full mask): 12·d·N per layer. The per-sample adaLN products are left out.
  const double per_layer = 6.0 * (4 * d * d + 2 * d * ff) + 12.0 * d * static_cast<double>(o.num_patches());
  return static_cast<double>(o.n_layer) * per_layer + 6.0 * (patch_in * d + d * patch_out);
}

void check_dit(const DitOptions& o, const config::RunConfig& c, std::vector<std::string>& problems) {
  const auto require = [&](bool ok, std::string message) {
    if (!ok) problems.push_back(std::move(message));
  };
  const auto require_problem = [&](std::string problem) {
    if (!problem.empty()) problems.push_back(std::move(problem));
  };
  require(o.image_size % o.patch_size == 0,
          fmt::format("model.patch_size: image_size = {} is not a multiple of patch_size = {}; choose a patch size "
                      "that divides the image",
                      o.image_size, o.patch_size));
  require(o.d_model % o.n_head == 0, fmt::format("model.d_model: d_model = {} is not a multiple of n_head = {}",
                                                 o.d_model, o.n_head));
  require(o.d_model % 4 == 0, fmt::format("model.d_model: the 2-D sin-cos positions need a multiple of 4, got {}",
                                          o.d_model));
  require(o.d_ff() >= 1, fmt::format("model.mlp_ratio: d_model · mlp_ratio = {} · {} leaves no hidden unit",
                                     o.d_model, o.mlp_ratio));
  require(!o.learn_sigma || o.diffusion == DiffusionKind::ddpm,
          "model.learn_sigma: the flow process predicts a velocity, not a variance; set learn_sigma: false or "
          "diffusion: ddpm");
  require(o.beta_start <= o.beta_end, fmt::format("model.beta_start: beta_start = {} exceeds beta_end = {}",
                                                  o.beta_start, o.beta_end));
  if (o.image_size % o.patch_size == 0) {
    require(c.train.seq_len == o.num_patches(),
            fmt::format("train.seq_len: DiT's sequence is its patches, {} frame(s) x ({} / {})^2 = {}; set "
                        "train.seq_len: {}",
                        o.frames, o.image_size, o.patch_size, o.num_patches(), o.num_patches()));
  }
  require_problem(dit_image_size_problem(o, c));
  const config::ParallelSection& p = c.parallel;
  require(!p.tp_shard_activations,
          "parallel.tp_shard_activations: DiT's adaLN modulation needs every token on each tp rank; set it to false");
  require_problem(config::tp_split_problem(c, "n_head", o.n_head, "whole attention heads"));
  require_problem(config::tp_split_problem(c, "mlp_ratio", o.d_ff(), "the MLP's d_model · mlp_ratio hidden units"));
  if (p.ulysses_degree() > 1 && o.n_head % p.tp == 0) {
    const std::string problem = parallel::ulysses_heads_problem(o.n_head / p.tp, o.n_head / p.tp, p.ulysses_degree());
    require(problem.empty(), fmt::format("model.n_head: {} scatters the n_head / parallel.tp = {} heads of each tp "
                                         "rank: {}",
                                         p.ulysses_degree_text(), o.n_head / p.tp, problem));
  }
}

DecoderOptions dit_block_shape(const DitOptions& o) {
  DecoderOptions shape;
  shape.n_layer = o.n_layer;
  shape.n_head = o.n_head;
  shape.n_kv_head = o.n_head;
  shape.d_model = o.d_model;
  shape.d_ff = o.d_ff();
  shape.feed_forward = nn::FeedForwardKind::mlp;
  shape.checkpoint_attention = o.checkpoint_attention;
  return shape;
}

std::shared_ptr<Model> make_dit(const config::RunConfig& config, comm::CommGrid& grid) {
  DitOptions options = dit_options(config);
  options.layers = tensor_parallel_layers(config, grid);
  options.stage = pipeline_stage(config, grid.grid());
  auto model = std::make_shared<Dit>(options);
  install_sp_attention(*model, config, grid);
  return model;
}

}  // namespace wf::models
