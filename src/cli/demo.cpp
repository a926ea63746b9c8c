// `wallfacer demo --data FILE`: trains a tiny byte-level transformer (the GPT of models/gpt) on a text
// file on this machine's CPU, printing the loss as it goes, then the validation loss and a
// short sample. It is the first thing a new user runs (scripts/demo.sh), so it doubles as a
// smoke test: it exits non-zero when training did not lower the loss.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "wallfacer/models/generate.h"
#include "wallfacer/models/gpt.h"
#include "src/cli/commands.h"
#include "src/cli/option_checks.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/threading.h"
#include "wallfacer/ops/activation.h"
#include "wallfacer/train/lr_schedule.h"
#include "wallfacer/train/optimizer.h"

namespace wf::cli {
namespace {

struct DemoOptions {
  std::string data;
  std::int64_t steps = 300;
  std::int64_t batch = 16;
  std::int64_t seq = 64;
  std::int64_t layers = 2;
  std::int64_t d_model = 64;
  std::int64_t heads = 4;
  double lr = 3e-3;
  std::uint64_t seed = 1;
  std::int64_t log_every = 25;
  std::int64_t sample = 200;
};

constexpr double kGradClip = 1.0;
constexpr std::int64_t kValidationBatches = 8;
constexpr const char* kHowToGetData =
    "run scripts/demo.sh (it writes the King James Bible to data/kjv.txt with Debian's bible-kjv package), "
    "or pass any text file of a few hundred kilobytes or more with --data";

// The whole file as bytes (the tokens of a byte-level model), with errors that say how to get one.
std::vector<std::uint8_t> read_data(const std::string& path, std::int64_t seq) {
  namespace fs = std::filesystem;
  std::error_code ec;
  WF_CHECK(fs::exists(path, ec), "demo: data file '{}' does not exist; {}", path, kHowToGetData);
  WF_CHECK(fs::is_regular_file(path, ec), "demo: '{}' is not a regular file; {}", path, kHowToGetData);
  std::ifstream in(path, std::ios::binary);
  WF_CHECK(in.good(), "demo: cannot open data file '{}' for reading (check its permissions)", path);
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  WF_CHECK(!bytes.empty(), "demo: data file '{}' is empty; {}", path, kHowToGetData);
  // The validation split (the last 10%) must hold at least one window of seq + 1 bytes.
  const std::int64_t needed = 10 * (seq + 1) + 10;
  WF_CHECK(static_cast<std::int64_t>(bytes.size()) >= needed,
           "demo: data file '{}' has {} bytes but --seq {} needs at least {} (10% is held out for validation and "
           "each window is seq + 1 bytes); {}",
           path, bytes.size(), seq, needed, kHowToGetData);
  return bytes;
}

struct Batch {
  Tensor inputs;   // [B, T] i64
  Tensor targets;  // [B, T] i64: inputs shifted left by one byte
};

// `batch` random windows of text[begin, end), drawn from `gen`.
Batch sample_batch(const std::vector<std::uint8_t>& text, std::int64_t begin, std::int64_t end, std::int64_t batch,
                   std::int64_t seq, std::mt19937_64& gen) {
  std::uniform_int_distribution<std::int64_t> start_of(begin, end - seq - 1);
  Batch b{Tensor::empty({batch, seq}, DType::i64), Tensor::empty({batch, seq}, DType::i64)};
  auto* inputs = b.inputs.data<std::int64_t>();
  auto* targets = b.targets.data<std::int64_t>();
  for (std::int64_t row = 0; row < batch; ++row) {
    const std::int64_t start = start_of(gen);
    for (std::int64_t t = 0; t < seq; ++t) {
      inputs[row * seq + t] = text[static_cast<std::size_t>(start + t)];
      targets[row * seq + t] = text[static_cast<std::size_t>(start + t + 1)];
    }
  }
  return b;
}

double validation_loss(models::Gpt& model, const std::vector<std::uint8_t>& text, std::int64_t begin,
                       std::int64_t end, const DemoOptions& o) {
  NoGradGuard no_grad;
  model.eval();
  std::mt19937_64 gen(o.seed + 1);  // the same windows for every run with this seed
  double total = 0;
  for (std::int64_t i = 0; i < kValidationBatches; ++i) {
    const Batch b = sample_batch(text, begin, end, o.batch, o.seq, gen);
    total += model.loss(b.inputs, b.targets).item();
  }
  model.train();
  return total / kValidationBatches;
}

// Continues `prompt` by `length` bytes, sampling at temperature 0.8 among all 256 bytes.
std::string generate(models::Gpt& model, const std::string& prompt, std::int64_t length, std::uint64_t seed) {
  std::vector<std::uint32_t> bytes(prompt.begin(), prompt.end());
  for (auto& b : bytes) b &= 0xFF;
  const auto tokens = models::generate(model, bytes, {.max_new_tokens = length, .temperature = 0.8, .top_k = 0, .seed = seed});
  model.train();
  return std::string(tokens.begin(), tokens.end());
}

// Bytes a terminal shows as they are; others become '?'.
std::string printable(std::string text) {
  for (char& c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u != '\n' && (u < 32 || u > 126)) c = '?';
  }
  return text;
}

int run_demo(const DemoOptions& o) {
  const std::vector<std::uint8_t> text = read_data(o.data, o.seq);
  const auto n = static_cast<std::int64_t>(text.size());
  const std::int64_t split = n - n / 10;  // train: [0, split), validation: [split, n)

  models::Gpt model(models::GptOptions{.vocab_size = 256,
                                       .max_seq_len = o.seq,
                                       .n_layer = o.layers,
                                       .n_head = o.heads,
                                       .d_model = o.d_model,
                                       .seed = o.seed});
  train::AdamW optimizer(model.parameters(), train::AdamWOptions{.lr = o.lr});
  const train::CosineSchedule schedule{.base_lr = o.lr,
                                       .min_lr = o.lr / 10,
                                       .warmup_steps = std::max<std::int64_t>(1, o.steps / 10),
                                       .total_steps = o.steps};
  const std::vector<Tensor> params = model.parameters();

  fmt::print("demo: GPT, {} layers, d_model {}, {} heads, {} parameters; {} threads\n", o.layers, o.d_model,
             o.heads, model.num_parameters(), num_threads());
  fmt::print("demo: data {}: {} bytes for training, {} for validation; {} steps of {}x{} tokens\n", o.data, split,
             n - split, o.steps, o.batch, o.seq);
  std::fflush(stdout);

  std::mt19937_64 gen(o.seed);
  std::vector<double> losses;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto interval_start = start;
  std::int64_t interval_tokens = 0;
  for (std::int64_t step = 1; step <= o.steps; ++step) {
    const double lr = schedule.lr_at(step);
    optimizer.set_lr(lr);
    const Batch b = sample_batch(text, 0, split, o.batch, o.seq, gen);
    const Tensor loss = model.loss(b.inputs, b.targets);
    const double value = loss.item();
    WF_CHECK(std::isfinite(value), "demo: the loss became {} at step {}; lower --lr (now {})", value, step, o.lr);
    loss.backward();
    train::clip_grad_norm(params, kGradClip);
    optimizer.step();
    optimizer.zero_grad();
    losses.push_back(value);
    interval_tokens += o.batch * o.seq;

    if (step == 1 || step % o.log_every == 0 || step == o.steps) {
      const auto now = Clock::now();
      const double seconds = std::chrono::duration<double>(now - interval_start).count();
      fmt::print("step {}/{} loss {:.4f} lr {:.3e} tokens/s {:.0f}\n", step, o.steps, value, lr,
                 interval_tokens / std::max(seconds, 1e-9));
      std::fflush(stdout);
      interval_start = now;
      interval_tokens = 0;
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  // One step's loss is noisy: compare the mean of the last tenth of the run with the first step.
  const auto tail = static_cast<std::size_t>(std::max<std::int64_t>(1, o.steps / 10));
  double final_loss = 0;
  for (std::size_t i = losses.size() - tail; i < losses.size(); ++i) final_loss += losses[i];
  final_loss /= static_cast<double>(tail);
  const double initial_loss = losses.front();
  const double val_loss = validation_loss(model, text, split, n, o);
  fmt::print("final: train loss {:.4f} (mean of the last {} steps; initial {:.4f}), validation loss {:.4f}, "
             "{:.1f} s\n",
             final_loss, tail, initial_loss, val_loss, seconds);

  if (o.sample > 0) {
    const std::string prompt(text.begin() + split, text.begin() + split + std::min<std::int64_t>(16, o.seq));
    fmt::print("sample (prompt: the first {} bytes of the validation text):\n{}\n", prompt.size(),
               printable(generate(model, prompt, o.sample, o.seed)));
  }
  std::fflush(stdout);

  if (!(final_loss < initial_loss)) {
    print_error(fmt::format("demo: training did not lower the loss (initial {:.4f}, final {:.4f}); try more --steps "
                            "or a different --lr",
                            initial_loss, final_loss));
    return kExitRuntimeError;
  }
  return kExitOk;
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* command =
      app.add_subcommand("demo", "Train a tiny byte-level transformer on a text file (CPU, about a minute)");
  command->add_option("--data", o->data, "Text file to train on (scripts/demo.sh makes data/kjv.txt)")->required();
  const auto add_positive = [&](const char* name, std::int64_t& value, const char* help) {
    command->add_option(name, value, help)->check(positive())->capture_default_str();
  };
  command->add_option("--steps", o->steps, "Optimizer steps")
      ->check(in_range(std::int64_t{2}, std::int64_t{100000000}))
      ->capture_default_str();
  add_positive("--batch", o->batch, "Sequences per step");
  command->add_option("--seq", o->seq, "Tokens (bytes) per sequence")
      ->check(in_range(std::int64_t{2}, std::int64_t{65536}))
      ->capture_default_str();
  add_positive("--layers", o->layers, "Transformer blocks");
  add_positive("--d-model", o->d_model, "Width of the residual stream");
  add_positive("--heads", o->heads, "Attention heads (must divide --d-model)");
  command->add_option("--lr", o->lr, "Peak learning rate (warmup over the first 10% of steps, cosine to lr/10)")
      ->check(positive())
      ->capture_default_str();
  command->add_option("--seed", o->seed, "Seed of the weights and of the batch sampling")->capture_default_str();
  add_positive("--log-every", o->log_every, "Print the loss every this many steps");
  command->add_option("--sample", o->sample, "Bytes of text to generate at the end (0: none)")
      ->check(non_negative())
      ->capture_default_str();
  // Checked while parsing, so a bad combination is a usage error like a bad single value.
  command->parse_complete_callback([o] {
    WF_USER_CHECK(o->d_model % o->heads == 0, "demo: --heads {} must divide --d-model {}", o->heads, o->d_model);
  });
  set_action(*command, [o] { return run_demo(*o); });
}

}  // namespace wf::cli
