// DiT against plain PyTorch (Debian's python3-torch 1.13, tests/reference/dit_reference.py, itself
// checked against the official facebookresearch/DiT layout by dit_reference_selftest.py): the
// same weights, images, noise, times and labels give the same output, diffusion loss and
// gradient of every parameter, for ddpm with and without the learned variance and for rectified
// flow. Tolerance as the decoders': max |ours − torch| ≤ 1e-5 · max |torch| per tensor, the
// reference in f64. Hidden ("[.torch]"): CTest's models_torch_reference runs it.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/reference_testing.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/models/dit.h"
#include "wallfacer/ops/ops.h"
#include "wallfacer/train/safetensors.h"

namespace fs = std::filesystem;
using namespace wf;
using namespace wf::models;
using namespace wf::models::testing;

namespace {

struct Case {
  std::string label;
  DitOptions options;
  std::vector<double> times;
};

std::vector<Case> cases() {
  DitOptions base;
  base.image_size = 8;
  base.in_channels = 2;
  base.patch_size = 2;
  base.d_model = 32;
  base.n_layer = 2;
  base.n_head = 4;
  base.num_classes = 4;
  base.seed = 21;
  DitOptions sigma = base;
  sigma.learn_sigma = true;
  sigma.mlp_ratio = 2.5;
  sigma.seed = 22;
  DitOptions flow = base;
  flow.diffusion = DiffusionKind::flow;
  flow.patch_size = 4;
  flow.class_dropout = 0.0;  // no null class row
  flow.seed = 23;
  return {{"ddpm, epsilon MSE, null class", base, {0, 500, 999}},
          {"ddpm, learn_sigma (MSE + variational bound, decoder term at t = 0), mlp_ratio 2.5", sigma, {0, 1, 250}},
          {"flow (velocity), 4x4 patches, no null class", flow, {0.1, 0.5, 0.95}}};
}

std::map<std::string, std::string> metadata(const DitOptions& o) {
  return {{"in_channels", std::to_string(o.in_channels)},
          {"image_size", std::to_string(o.image_size)},
          {"patch_size", std::to_string(o.patch_size)},
          {"d_model", std::to_string(o.d_model)},
          {"n_layer", std::to_string(o.n_layer)},
          {"n_head", std::to_string(o.n_head)},
          {"mlp_ratio", fmt::format("{}", o.mlp_ratio)},
          {"num_classes", std::to_string(o.num_classes)},
          {"class_dropout", fmt::format("{}", o.class_dropout)},
          {"learn_sigma", o.learn_sigma ? "true" : "false"},
          {"diffusion", diffusion_kind_name(o.diffusion)},
          {"num_timesteps", std::to_string(o.num_timesteps)},
          {"beta_start", fmt::format("{}", o.beta_start)},
          {"beta_end", fmt::format("{}", o.beta_end)}};
}

struct Run {
  Case c;
  std::unique_ptr<Dit> model;
  Tensor out, loss;
  std::string in, out_file;
};

Run run_ours(const Case& c, const fs::path& dir, int index) {
  Run r{c, std::make_unique<Dit>(c.options), {}, {}, (dir / fmt::format("in{}.safetensors", index)).string(),
        (dir / fmt::format("out{}.safetensors", index)).string()};
  Dit& model = *r.model;
  // The published init zeroes the modulations and the final layer: redraw every parameter so
  // each one matters (std 0.15 keeps the 2-layer model's activations of order 1).
  std::uint64_t offset = 0;
  for (auto& [name, p] : model.named_parameters()) {
    const Tensor w = Tensor::randn_at(p.shape(), c.options.seed + 100, offset);
    offset += static_cast<std::uint64_t>(p.numel());
    autograd::NoGradGuard no_grad;
    p.copy_(scale(w, 0.15));
  }
  const DitOptions& o = c.options;
  const auto B = static_cast<std::int64_t>(c.times.size());
  const Shape shape = {B, o.in_channels, o.image_size, o.image_size};
  // Images in [−1, 1] as the data are; noise standard normal.
  const Tensor x0 = add_scalar(scale(Tensor::rand_at(shape, o.seed + 200, 0), 2.0), -1.0);
  const Tensor noise = Tensor::randn_at(shape, o.seed + 300, 0);
  std::vector<std::int64_t> labels;
  for (std::int64_t b = 0; b < B; ++b) labels.push_back(b % (o.num_classes + (o.class_dropout > 0 ? 1 : 0)));
  const Tensor y = Tensor::from_vector(labels, {B});
  const Tensor t = o.diffusion == DiffusionKind::flow
                       ? Tensor::from_vector(c.times, {B}).to(DType::f32)
                       : Tensor::from_vector(c.times, {B}).to(DType::i64);

  nn::StateDict file = model.state_dict();
  file.insert("x0", x0);
  file.insert("noise", noise);
  file.insert("t", t);
  file.insert("labels", y);
  train::save_safetensors(r.in, file, metadata(o));

  Batch batch;
  batch.set("images", x0).set("noise", noise).set("times", Tensor::from_vector(c.times, {B})).set("labels", y);
  batch.set("positions", Tensor::arange(0.0, static_cast<double>(o.num_patches()), 1.0, DType::i64));
  std::vector<double> model_times;
  for (const double time : c.times) model_times.push_back(model.diffusion().model_time(time));
  {
    autograd::NoGradGuard no_grad;
    r.out = model.forward(model.diffusion().noised(x0, noise, c.times), Tensor::from_vector(model_times, {B}), y);
  }
  model.zero_grad();
  const LossSum sum = model.loss_sum(batch);
  r.loss = scale(sum.sum, 1.0 / sum.count.item());
  autograd::backward({r.loss});
  return r;
}

}  // namespace

TEST_CASE("dit: output, diffusion loss and gradients match PyTorch (tests/reference/dit_reference.py)",
          "[models][dit][reference][.torch]") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("wf_dit_reference_{}", ::getpid());
  fs::create_directories(dir);
  std::vector<Run> runs;
  std::vector<std::pair<std::string, std::string>> files;
  for (const Case& c : cases()) {
    runs.push_back(run_ours(c, dir, static_cast<int>(runs.size())));
    files.emplace_back(runs.back().in, runs.back().out_file);
  }
  run_reference_script("dit_reference.py", files);
  for (const Run& r : runs) {
    check_against_reference("DiT " + r.c.label, r.out_file, {{"out", r.out}, {"loss", r.loss}}, *r.model, r.loss.item());
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
}
