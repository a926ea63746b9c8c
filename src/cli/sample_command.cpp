// `wallfacer sample CFG.yaml --checkpoint DIR [--class K] [--n N] [--out FILE.png] [--steps S]
// [--guidance G] [--seed S] [--no-ema] [--set k=v]...`: draws images from a trained diffusion
// model (DiT) and writes them as one PNG grid. The model is built from CFG (one process,
// whatever layout it trained with) and takes the checkpoint's weights, by default their EMA
// (train.ema_decay) when the checkpoint holds one, with a warning when that EMA is still mostly
// the initial weights (a short run without the EMA warm-up: the images would be noise). No mpirun
// needed.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "src/cli/checkpoint_option.h"
#include "src/cli/commands.h"
#include "src/cli/option_checks.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/core/log.h"
#include "wallfacer/data/png_grid.h"
#include "wallfacer/models/dit.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/optimizer.h"

namespace wf::cli {
namespace {

struct SampleCommandOptions {
  std::string path;
  std::vector<std::string> overrides;
  std::string checkpoint;
  std::int64_t label = -1;  // -1: the classes in turn
  std::int64_t n = 16;
  std::string out = "samples.png";
  bool no_ema = false;
  models::DitSampleOptions sampling;
};

// The checkpoint's EMA of each parameter ("<name>.ema") in place of its weights; how many.
std::size_t use_ema_weights(const train::Checkpoint& checkpoint, nn::Module& model) {
  nn::StateDict weights;
  std::size_t replaced = 0;
  for (const auto& [name, tensor] : model.state_dict()) {
    const std::string key = name + ".ema";
    const bool averaged = checkpoint.optimizer.contains(key);
    weights.insert(name, averaged ? checkpoint.optimizer.at(key) : tensor);
    replaced += averaged ? 1 : 0;
  }
  model.load_state_dict(weights);
  return replaced;
}

// Past this share of the initial weights an EMA is barely trained: a fresh DiT's zero-initialised
// output layer scaled by more than 0.05 leaves the samples mostly noise. Without the warm-up that is
// the first ln(20) / (1 − d) ≈ 3 horizons of steps; with it only the first step.
constexpr double kBarelyTrainedInitialShare = 0.05;

// A warning when the EMA weights of `checkpoint` still hold more than kBarelyTrainedInitialShare
// of the initial weights, by the decays its run used (its config: train.ema_decay, and
// train.ema_warmup where written; a config without the key predates the warm-up); "" otherwise.
std::string barely_trained_ema_warning(const train::Checkpoint& checkpoint) {
  config::RunConfig trained;
  try {
    trained = config::parse_config(checkpoint.config_yaml, {}, checkpoint.dir + "/manifest.json");
  } catch (const Error&) {
    return "";  // a config this build no longer reads (a key since renamed): no reason to refuse its weights
  }
  const double decay = trained.train.ema_decay;
  const bool warmup = trained.given.contains("train.ema_warmup") && trained.train.ema_warmup;
  const double initial = train::ema_initial_weight(decay, checkpoint.step, warmup);
  if (decay <= 0 || initial <= kBarelyTrainedInitialShare) return "";
  return fmt::format("sample: the EMA weights are barely trained: after {} steps at train.ema_decay {} ({}, a horizon "
                     "of 1 / (1 - {}) = {:.0f} steps) they are still {:.0f}% the initial weights, so the images may "
                     "be noise; sample the trained weights with --no-ema, or {}",
                     checkpoint.step, decay, warmup ? "warmed up" : "without warm-up", decay, 1 / (1 - decay),
                     100 * initial, warmup ? "train longer" : "train on with the EMA warm-up (train.ema_warmup true)");
}

int sample(const SampleCommandOptions& o) {
  check_writable(o.out, "--out");  // before the model is built and sampled, not after
  const config::RunConfig config =
      single_process_config(config::load_config(o.path, o.overrides), o.path);
  comm::CommGrid grid(comm::ProcessGrid(config.parallel.grid(), 1, 0));
  const std::shared_ptr<models::Model> model = models::create(config, grid);
  auto* dit = dynamic_cast<models::Dit*>(model.get());
  WF_USER_CHECK(dit != nullptr, "{}: model '{}' does not draw images; wallfacer sample serves diffusion models (dit)",
                o.path, model->name());
  const train::Checkpoint checkpoint = load_checkpoint_option(o.checkpoint);
  train::check_model_fits(checkpoint, *model);
  model->load_state_dict(checkpoint.model);
  const std::size_t ema = o.no_ema ? 0 : use_ema_weights(checkpoint, *model);
  log::info("sample: step {} of {}, {} weights{}", checkpoint.step, checkpoint.dir,
            ema > 0 ? "EMA" : "trained", ema == 0 && !o.no_ema ? " (the checkpoint holds no EMA: train.ema_decay 0)" : "");
  if (ema > 0) {
    if (const std::string warning = barely_trained_ema_warning(checkpoint); !warning.empty()) log::warn("{}", warning);
  }

  models::DitSampleOptions sampling = o.sampling;
  for (std::int64_t i = 0; i < o.n; ++i) {
    sampling.labels.push_back(o.label >= 0 ? o.label : i % dit->options().num_classes);
  }
  WF_USER_CHECK(dit->options().frames == 1, "sample: a video model's frames do not fit one image grid");
  const Tensor images = models::sample_dit(*dit, sampling);
  data::write_png_grid(o.out, images);
  log::info("sample: {} images of class {} ({} steps, guidance {}) written to {}", o.n,
            o.label >= 0 ? std::to_string(o.label) : "0.." + std::to_string(dit->options().num_classes - 1),
            sampling.steps, sampling.guidance, o.out);
  return kExitOk;
}

}  // namespace

void add_sample_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("sample", "Draw images from a trained diffusion model's checkpoint");
  auto options = std::make_shared<SampleCommandOptions>();
  command->add_option("config", options->path, "The run config, e.g. configs/dit-fashion.yaml")->required();
  command->add_option("--set", options->overrides, "Override one key, e.g. --set model.learn_sigma=true (repeatable)");
  command->add_option("--checkpoint", options->checkpoint, "checkpoint.dir of a run (newest checkpoint) or a step-* dir")
      ->required();
  command->add_option("--class", options->label, "Class of every image; -1: the classes in turn")
      ->check(in_range(std::int64_t{-1}, std::int64_t{1} << 24, "a class index, or -1 for all classes"))
      ->capture_default_str();
  command->add_option("--n", options->n, "Images to draw")
      ->check(in_range(std::int64_t{1}, std::int64_t{4096}, "1 to 4096 images"))
      ->capture_default_str();
  command->add_option("--out", options->out, "The PNG grid to write")
      ->check(output_file("--out samples.png"))
      ->capture_default_str();
  command->add_option("--steps", options->sampling.steps, "DDIM (ddpm) or Euler (flow) steps")
      ->check(in_range(std::int64_t{1}, std::int64_t{100000}, "1 to 100000 steps"))
      ->capture_default_str();
  command->add_option("--guidance", options->sampling.guidance, "Classifier-free guidance scale; 1: none")
      ->check(non_negative())
      ->capture_default_str();
  command->add_option("--seed", options->sampling.seed, "Seed of the initial noise")->capture_default_str();
  command->add_flag("--no-ema", options->no_ema, "Use the trained weights even where the checkpoint holds their EMA");
  command->add_flag("--no-clip", [options](std::int64_t) { options->sampling.clip = false; },
                    "ddpm: do not clamp each step's predicted image to [-1, 1] (for unbounded data such as latents)");
  set_action(*command, [options] { return comm::run_main(0, nullptr, [&] { return sample(*options); }); });
}

}  // namespace wf::cli
