// DiT (models/dit.h), its nn parts (adaLN-Zero, timestep embedder, sin-cos positions) and the
// diffusion processes (models/diffusion.h): shapes, the published init's identities, gradients
// against central differences in f64, the samplers on exact denoisers, stages and the checkpoint.
// The comparison with PyTorch is tests/models/test_dit_reference.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <vector>

#include "models/model_testing.h"
#include "nn/module_testing.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/models/dit.h"
#include "wallfacer/models/dit_batches.h"
#include "wallfacer/nn/adaln.h"
#include "wallfacer/nn/sincos_position.h"
#include "wallfacer/nn/timestep_embedder.h"
#include "wallfacer/ops/ops.h"

using namespace wf;
using namespace wf::models;
using Catch::Matchers::Contains;

namespace {

DitOptions tiny_dit(std::uint64_t seed = 3) {
  DitOptions o;
  o.image_size = 8;
  o.in_channels = 2;
  o.patch_size = 2;
  o.d_model = 16;
  o.n_layer = 2;
  o.n_head = 2;
  o.num_classes = 5;
  o.seed = seed;
  return o;
}

// Every parameter redrawn normal(0, std²): the published init zeroes the modulations and the
// final layer, which would make most gradients vanish.
void randomise(nn::Module& model, double std, std::uint64_t seed) {
  std::uint64_t offset = 0;
  for (auto& [name, p] : model.named_parameters()) {
    const Tensor r = Tensor::randn_at(p.shape(), seed, offset, p.dtype());
    offset += static_cast<std::uint64_t>(p.numel());
    autograd::NoGradGuard no_grad;
    p.copy_(scale(r, std));
  }
}

Tensor random_images(const Shape& shape, std::uint64_t seed) {
  return Tensor::randn_at(shape, seed, 0, DType::f32);
}

Batch dit_batch(const DitOptions& o, std::int64_t batch, std::vector<double> times, std::uint64_t seed,
                const Tensor& positions) {
  Batch b;
  const Shape shape = {batch, o.in_channels, o.image_size, o.image_size};
  std::vector<std::int64_t> labels;
  for (std::int64_t i = 0; i < batch; ++i) labels.push_back(i % (o.num_classes + 1));
  b.set("images", random_images(shape, seed)).set("noise", random_images(shape, seed + 1));
  b.set("times", Tensor::from_vector(times, {batch})).set("labels", Tensor::from_vector(labels, {batch}));
  b.set("positions", positions);
  return b;
}

}  // namespace

TEST_CASE("dit: patchify orders patches row-major and each patch (c, i, j) or (i, j, c); unpatchify inverts it",
          "[models][dit]") {
  const std::int64_t B = 2, C = 3, H = 4, W = 6, p = 2;
  const Tensor x = random_images({B, C, H, W}, 1);
  for (const bool pixel_major : {false, true}) {
    const Tensor t = patchify(x, p, 1, pixel_major);
    REQUIRE(t.shape() == Shape({B, (H / p) * (W / p), C * p * p}));
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t r = 0; r < H / p; ++r) {
        for (std::int64_t q = 0; q < W / p; ++q) {
          for (std::int64_t c = 0; c < C; ++c) {
            for (std::int64_t i = 0; i < p; ++i) {
              for (std::int64_t j = 0; j < p; ++j) {
                const std::int64_t k = pixel_major ? (i * p + j) * C + c : (c * p + i) * p + j;
                const std::int64_t n = r * (W / p) + q;
                REQUIRE(t.at((b * t.size(1) + n) * t.size(2) + k) ==
                        x.at(((b * C + c) * H + r * p + i) * W + q * p + j));
              }
            }
          }
        }
      }
    }
  }
  // Square images round-trip through the output order.
  const Tensor square = random_images({B, C, 4, 4}, 2);
  const Tensor back = unpatchify(patchify(square, 2, 1, true), 2, 1, 2, C);
  CHECK(back.to_vector<float>() == square.to_vector<float>());
  // Video: [B, F, C, H, W] with frames before rows.
  const Tensor video = random_images({B, 3, C, 4, 4}, 3);
  CHECK(unpatchify(patchify(video, 2, 3, true), 2, 3, 2, C).to_vector<float>() == video.to_vector<float>());
  CHECK_THROWS_WITH(patchify(random_images({B, C, 5, 4}, 1), 2, 1, false), Contains("whole number"));
}

TEST_CASE("dit: sin-cos positions are MAE's 2-D table (column half first); the timestep embedding is cos then sin",
          "[models][dit]") {
  const std::int64_t D = 8, rows = 3, cols = 4;
  const Tensor table = nn::sincos_2d(D, rows, cols);
  REQUIRE(table.shape() == Shape({rows * cols, D}));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      for (std::int64_t k = 0; k < D / 4; ++k) {
        const double omega = 1.0 / std::pow(10000.0, double(k) / double(D / 4));
        const std::int64_t n = r * cols + c;
        CHECK(table.at(n * D + k) == Approx(std::sin(c * omega)).margin(1e-7));
        CHECK(table.at(n * D + D / 4 + k) == Approx(std::cos(c * omega)).margin(1e-7));
        CHECK(table.at(n * D + D / 2 + k) == Approx(std::sin(r * omega)).margin(1e-7));
        CHECK(table.at(n * D + 3 * D / 4 + k) == Approx(std::cos(r * omega)).margin(1e-7));
      }
    }
  }
  CHECK(nn::sincos_3d(D, 1, rows, cols).to_vector<float>() == table.to_vector<float>());
  const Tensor e = nn::timestep_frequency_embedding(Tensor::from_vector(std::vector<double>{0.0, 999.0}, {2}), 6);
  for (std::int64_t k = 0; k < 3; ++k) {
    const double freq = std::exp(-std::log(10000.0) * double(k) / 3.0);
    CHECK(e.at(k) == Approx(1.0));
    CHECK(e.at(3 + k) == Approx(0.0).margin(1e-7));
    CHECK(e.at(6 + k) == Approx(std::cos(999.0 * freq)).margin(1e-6));
    CHECK(e.at(9 + k) == Approx(std::sin(999.0 * freq)).margin(1e-6));
  }
}

TEST_CASE("dit: a fresh adaLN-Zero block is the identity and a fresh DiT predicts zeros; Xavier bounds hold",
          "[models][dit]") {
  nn::AdaLNZeroBlock block(nn::AdaLNZeroBlockOptions{.d_model = 16, .n_head = 2, .seed = 5});
  const Tensor x = random_images({2, 6, 16}, 7), c = random_images({2, 16}, 8);
  CHECK(block.forward(x, c, models::testing::positions_of(6)).to_vector<float>() == x.to_vector<float>());
  // Xavier-uniform: |w| < √(6 / (fan_in + fan_out)), with the spread of a uniform.
  const Tensor w = block.attention().named_parameters().front().second;  // a handle: the list is a temporary
  const double bound = std::sqrt(6.0 / (16.0 + 48.0));
  double sum_sq = 0;
  for (const float v : w.to_vector<float>()) {
    CHECK(std::abs(v) < bound);
    sum_sq += double(v) * v;
  }
  CHECK(std::sqrt(sum_sq / double(w.numel())) == Approx(bound / std::sqrt(3.0)).epsilon(0.1));

  Dit model(tiny_dit());
  const Tensor out = model.forward(random_images({2, 2, 8, 8}, 9), Tensor::from_vector(std::vector<double>{3, 500}, {2}),
                                   Tensor::from_vector(std::vector<std::int64_t>{1, 5}, {2}));
  CHECK(out.shape() == Shape({2, 2, 8, 8}));
  for (const float v : out.to_vector<float>()) REQUIRE(v == 0.0f);
}

TEST_CASE("dit: a video model patchifies frames x rows x cols with 3-D positions and trains on clips",
          "[models][dit]") {
  DitOptions o = tiny_dit();
  o.frames = 3;
  Dit model(o);
  randomise(model, 0.2, 81);
  CHECK(o.num_patches() == 3 * 4 * 4);
  const Tensor clips = random_images({2, 3, 2, 8, 8}, 83);
  const Tensor out = model.forward(clips, Tensor::from_vector(std::vector<double>{4, 800}, {2}),
                                   Tensor::from_vector(std::vector<std::int64_t>{0, 3}, {2}));
  CHECK(out.shape() == Shape({2, 3, 2, 8, 8}));
  // The temporal table tells frames apart: the same frame content at another time step differs.
  const Tensor table = nn::sincos_3d(o.d_model, 3, 4, 4);
  const auto t = table.to_vector<float>();
  CHECK(std::vector<float>(t.begin(), t.begin() + 16) != std::vector<float>(t.begin() + 16 * 16, t.begin() + 17 * 16));
  Batch batch;
  batch.set("images", clips).set("noise", random_images({2, 3, 2, 8, 8}, 84));
  batch.set("times", Tensor::from_vector(std::vector<double>{4, 800}, {2}));
  batch.set("labels", Tensor::from_vector(std::vector<std::int64_t>{0, 3}, {2}));
  batch.set("positions", models::testing::positions_of(o.num_patches()));
  const LossSum loss = model.loss_sum(batch);
  CHECK(loss.count.item() == clips.numel());
  autograd::backward({loss.sum});
  for (const auto& [name, p] : model.named_parameters()) {
    INFO(name);
    CHECK(p.grad().defined());
  }
}

TEST_CASE("dit: the parameter count formula equals the built model's; the registry builds it from its keys",
          "[models][dit]") {
  for (const bool learn_sigma : {false, true}) {
    for (const double dropout : {0.0, 0.1}) {
      DitOptions o = tiny_dit();
      o.learn_sigma = learn_sigma;
      o.class_dropout = dropout;
      Dit model(o);
      double count = 0;
      for (const auto& [name, p] : model.named_parameters()) count += double(p.numel());
      CHECK(dit_parameter_count(o) == count);
      CHECK(model.forward(random_images({1, 2, 8, 8}, 1), Tensor::from_vector(std::vector<double>{1}, {1}),
                          Tensor::from_vector(std::vector<std::int64_t>{0}, {1}))
                .size(1) == (learn_sigma ? 4 : 2));
    }
  }
  const auto names = Dit(tiny_dit()).named_parameters();
  std::vector<std::string> expected = {"x_embedder.weight", "t_embedder.fc1.weight", "y_embedder.weight",
                                       "blocks.0.adaLN.weight", "blocks.1.attn.qkv.weight", "blocks.1.mlp.proj.bias",
                                       "final_layer.adaLN.weight", "final_layer.linear.weight"};
  for (const std::string& name : expected) {
    INFO(name);
    CHECK(std::any_of(names.begin(), names.end(), [&](const auto& n) { return n.first == name; }));
  }
}

TEST_CASE("dit: gradients of every parameter match central differences in f64 (ddpm, flow, learn_sigma)",
          "[models][dit]") {
  struct Case {
    DiffusionKind kind;
    bool learn_sigma;
    std::vector<double> times;
  };
  for (const Case& k : {Case{DiffusionKind::ddpm, false, {0, 700}}, Case{DiffusionKind::ddpm, true, {0, 321}},
                        Case{DiffusionKind::flow, false, {0.25, 0.9}}}) {
    DitOptions o = tiny_dit();
    o.diffusion = k.kind;
    o.learn_sigma = k.learn_sigma;
    Dit model(o);
    model.to(DType::f64);
    randomise(model, 0.3, 17);
    const Batch batch = dit_batch(o, 2, k.times, 21, models::testing::positions_of(o.num_patches()));
    // The loss as a function of a dummy input, so check_module_gradients perturbs the parameters.
    // With learn_sigma the bound stops the mean's gradient (central differences would see it), so
    // there the model's output is checked; the bound's own derivative has the test below.
    const auto loss = [&](const Tensor&) { return model.loss_sum(batch).sum; };
    const auto output = [&](const Tensor&) {
      return model.forward(batch.at("images").to(DType::f64), batch.at("times"), batch.at("labels"));
    };
    INFO(diffusion_kind_name(k.kind) << (k.learn_sigma ? " learn_sigma (output)" : " (loss)"));
    if (k.learn_sigma) {
      wf::nn::testing::check_module_gradients(model, output, Tensor::zeros({1}, DType::i64), 1e-6, 1e-4);
    } else {
      wf::nn::testing::check_module_gradients(model, loss, Tensor::zeros({1}, DType::i64), 1e-6, 1e-4);
    }
  }
}

TEST_CASE("dit: DDIM and Euler recover x0 from an exact denoiser; the schedule is DiT's linear one", "[models][dit]") {
  const Tensor x0 = random_images({2, 3, 4, 4}, 31), noise = random_images({2, 3, 4, 4}, 32);
  Diffusion ddpm({});
  CHECK(ddpm.beta(0) == 1e-4);
  CHECK(ddpm.beta(999) == Approx(0.02).epsilon(1e-12));
  CHECK(ddpm.alpha_bar(0) == 1.0 - 1e-4);
  // The exact ε of x_t for the known x0.
  const Diffusion::Denoiser exact_eps = [&](const Tensor& x_t, const std::vector<double>& times) {
    const double ab = ddpm.alpha_bar(static_cast<std::int64_t>(times[0]));
    return scale(sub(x_t, scale(x0, std::sqrt(ab))), 1.0 / std::sqrt(1.0 - ab));
  };
  const Tensor start = ddpm.noised(x0, noise, std::vector<double>(2, 999.0));
  for (const std::int64_t steps : {1, 50, 1000}) {
    const Tensor out = ddpm.sample(exact_eps, start, steps);
    const auto a = out.to_vector<float>(), b = x0.to_vector<float>();
    for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == Approx(b[i]).margin(2e-3));
  }
  // Clamping x̂₀ to [−1, 1] changes nothing for data inside it, and bounds a wrong denoiser's images.
  const Tensor pixels = add_scalar(scale(Tensor::rand_at({2, 3, 4, 4}, 33, 0), 2.0), -1.0);
  const Diffusion::Denoiser exact_pixels_eps = [&](const Tensor& x_t, const std::vector<double>& times) {
    const double ab = ddpm.alpha_bar(static_cast<std::int64_t>(times[0]));
    return scale(sub(x_t, scale(pixels, std::sqrt(ab))), 1.0 / std::sqrt(1.0 - ab));
  };
  const auto clipped = ddpm.sample(exact_pixels_eps, ddpm.noised(pixels, noise, std::vector<double>(2, 999.0)), 50,
                                   /*clip_x0=*/true).to_vector<float>();
  const auto px = pixels.to_vector<float>();
  for (std::size_t i = 0; i < px.size(); ++i) REQUIRE(clipped[i] == Approx(px[i]).margin(2e-3));
  const Diffusion::Denoiser zero_eps = [&](const Tensor& x_t, const std::vector<double>&) { return scale(x_t, 0.0); };
  for (const float v : ddpm.sample(zero_eps, start, 20, true).to_vector<float>()) REQUIRE(std::abs(v) <= 1.0f + 1e-6f);
  Diffusion flow({.kind = DiffusionKind::flow});
  const Diffusion::Denoiser exact_velocity = [&](const Tensor&, const std::vector<double>& times) {
    CHECK(times[0] > 0);  // model times 1000·t, t in (0, 1]
    return sub(noise, x0);
  };
  const auto a = flow.sample(exact_velocity, noise, 7).to_vector<float>(), b = x0.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == Approx(b[i]).margin(1e-5));
  CHECK_THROWS_WITH(Diffusion({.kind = DiffusionKind::flow, .learn_sigma = true}), Contains("learn_sigma"));
}

TEST_CASE("dit: the training loss is Σ (model(x_t) − ε)² in image space; its count is every element",
          "[models][dit]") {
  for (const DiffusionKind kind : {DiffusionKind::ddpm, DiffusionKind::flow}) {
    DitOptions o = tiny_dit();
    o.diffusion = kind;
    Dit model(o);
    randomise(model, 0.2, 41);
    const std::vector<double> times = kind == DiffusionKind::ddpm ? std::vector<double>{5, 600} : std::vector<double>{0.1, 0.8};
    const Batch batch = dit_batch(o, 2, times, 43, models::testing::positions_of(o.num_patches()));
    const LossSum loss = model.loss_sum(batch);
    CHECK(loss.count.item() == batch.at("images").numel());
    // The same through the whole-image forward and unpatchify: targets and outputs line up.
    const Tensor& x0 = batch.at("images");
    const Tensor& noise = batch.at("noise");
    std::vector<double> model_times;
    for (const double t : times) model_times.push_back(model.diffusion().model_time(t));
    const Tensor out = model.forward(model.diffusion().noised(x0, noise, times), Tensor::from_vector(model_times, {2}),
                                     batch.at("labels"));
    const Tensor error = sub(out, model.diffusion().target(x0, noise));
    INFO(diffusion_kind_name(kind));
    CHECK(loss.sum.item() == Approx(sum(mul(error, error)).item()).epsilon(1e-5));
  }
}

TEST_CASE("dit: stages hold the whole model's weights bit for bit and chain to its loss and gradients",
          "[models][dit][pp]") {
  DitOptions o = tiny_dit();
  o.n_layer = 3;
  Dit whole(o);
  randomise(whole, 0.2, 51);
  DitOptions first = o, second = o;
  first.stage = StageRange{.chunks = {BlockRange{0, 2}}, .embedding = true, .head = false};
  second.stage = StageRange{.chunks = {BlockRange{2, 3}}, .embedding = false, .head = true};
  Dit a(first), b(second);
  // Copy the randomised weights by name (the stages were built from the same seed).
  const auto source = whole.named_parameters();
  for (Dit* stage : {&a, &b}) {
    for (auto& [name, p] : stage->named_parameters()) {
      const auto it = std::find_if(source.begin(), source.end(), [&](const auto& s) { return s.first == name; });
      REQUIRE(it != source.end());
      autograd::NoGradGuard no_grad;
      p.copy_(it->second);
    }
  }
  const Batch batch = dit_batch(o, 2, {10, 900}, 53, models::testing::positions_of(o.num_patches()));
  const LossSum reference = whole.loss_sum(batch);
  autograd::backward({reference.sum});
  const StageOutput mid = a.forward_stage(batch, Tensor());
  REQUIRE(mid.hidden.shape() == Shape({2, 1 + o.num_patches(), o.d_model}));
  CHECK(a.stage_hidden(batch).first == mid.hidden.shape());
  Tensor received = mid.hidden.detach();
  received.set_requires_grad(true);
  const StageOutput end = b.forward_stage(batch, received);
  CHECK(end.loss.sum.item() == reference.sum.item());
  autograd::backward({end.loss.sum});
  autograd::backward({mid.hidden}, {received.grad()});
  for (Dit* stage : {&a, &b}) {
    for (const auto& [name, p] : stage->named_parameters()) {
      const auto it = std::find_if(source.begin(), source.end(), [&](const auto& s) { return s.first == name; });
      INFO(name);
      CHECK(p.grad().to_vector<float>() == it->second.grad().to_vector<float>());
    }
  }
}

TEST_CASE("dit: checkpointing at the attention output leaves every gradient unchanged", "[models][dit]") {
  std::vector<std::map<std::string, Tensor>> grads;
  for (const bool checkpoint : {false, true}) {
    DitOptions o = tiny_dit();
    o.checkpoint_attention = checkpoint;
    Dit model(o);
    randomise(model, 0.2, 61);
    const Batch batch = dit_batch(o, 2, {1, 999}, 63, models::testing::positions_of(o.num_patches()));
    autograd::backward({model.loss_sum(batch).sum});
    grads.push_back(models::testing::grads_by_name(model));
  }
  // The conditioning's gradient is summed in another order (each block's two halves, then the
  // blocks), so the embedders' gradients agree to f32 rounding; everything else bit for bit.
  for (const auto& [name, g] : grads[0]) {
    INFO(name);
    const auto a = g.to_vector<float>(), b = grads[1].at(name).to_vector<float>();
    double scale = 0;
    for (const float v : a) scale = std::max(scale, std::abs(double(v)));
    for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(std::abs(a[i] - b[i]) <= 1e-6 * scale);
  }
}

TEST_CASE("dit: the batch source draws each sample's time, noise and label dropout from its stream index alone",
          "[models][dit][data]") {
  DitOptions o = tiny_dit();
  o.class_dropout = 0.5;
  auto dataset = std::make_shared<data::ImageDataset>(data::synthetic_images(10, 2, 8, 5, 71));
  const std::vector<std::int64_t> all_positions = [&] {
    std::vector<std::int64_t> p;
    for (std::int64_t i = 0; i < o.num_patches(); ++i) p.push_back(i);
    return p;
  }();
  const DitDrawSeeds seeds = DitDrawSeeds::for_run(7, false);
  // One rank with micro batch 4 against two dp ranks with 2 each: the same four samples.
  DitBatchSource one(dataset, o, {.samples_per_epoch = 10, .micro_batch_size = 4, .seed = 9}, all_positions, seeds, true);
  const Batch whole = one.get(3, 0);
  for (int rank = 0; rank < 2; ++rank) {
    DitBatchSource half(dataset, o,
                        {.samples_per_epoch = 10, .micro_batch_size = 2, .dp_size = 2, .dp_rank = rank, .seed = 9},
                        all_positions, seeds, true);
    const Batch part = half.get(3, 0);
    for (const char* name : {"images", "noise", "times", "labels"}) {
      const Tensor& w = whole.at(name);
      const std::int64_t per = w.numel() / 4;
      const auto a = w.to_vector<double>(), b = part.at(name).to_vector<double>();
      INFO(name << " rank " << rank);
      CHECK(std::vector<double>(a.begin() + rank * 2 * per, a.begin() + (rank + 1) * 2 * per) == b);
    }
  }
  // Times are ddpm steps; dropped labels are the null class.
  for (const double t : whole.at("times").to_vector<double>()) CHECK((t >= 0 && t < 1000 && t == std::floor(t)));
  for (const std::int64_t y : whole.at("labels").to_vector<std::int64_t>()) CHECK((y >= 0 && y <= 5));
}

TEST_CASE("dit: data that does not fit the model, and sampling requests it cannot serve, fail with the fix",
          "[models][dit][data]") {
  DitOptions o = tiny_dit();  // 2 channels, 8x8, 5 classes
  const std::vector<std::int64_t> positions = {0, 1, 2, 3};
  const DitDrawSeeds seeds = DitDrawSeeds::for_run(1, false);
  const data::SampleOrderOptions order{.samples_per_epoch = 4};
  const auto three_channels = std::make_shared<data::ImageDataset>(data::synthetic_images(4, 3, 8, 5, 1));
  CHECK_THROWS_WITH(DitBatchSource(three_channels, o, order, positions, seeds, true),
                    Contains("model.in_channels = 2") && Contains("set model.in_channels and model.image_size"));
  const auto more_classes = std::make_shared<data::ImageDataset>(data::synthetic_images(40, 2, 8, 10, 1));
  CHECK_THROWS_WITH(DitBatchSource(more_classes, o, order, positions, seeds, true),
                    Contains("model.num_classes is 5") && Contains("raise model.num_classes"));

  Dit model(o);
  CHECK_THROWS_WITH(sample_dit(model, {.labels = {5}}), Contains("class 5 is outside the model's classes 0..4"));
  CHECK_THROWS_WITH(sample_dit(model, {}), Contains("no images asked for"));
  DitOptions unguided = o;
  unguided.class_dropout = 0.0;
  Dit no_null(unguided);
  CHECK_THROWS_WITH(sample_dit(no_null, {.labels = {1}, .guidance = 4.0}), Contains("needs the null class"));
  CHECK(sample_dit(no_null, {.labels = {1}, .guidance = 1.0, .steps = 2}).shape() == Shape({1, 2, 8, 8}));
}
