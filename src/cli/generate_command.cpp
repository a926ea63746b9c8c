// `wallfacer generate --checkpoint DIR --prompt TEXT [--tokens N] [--temperature T] [--top-k K]
// [--seed S]`: loads a checkpoint written by `wallfacer train` (the newest one of a checkpoint
// directory, or one step-* directory), rebuilds the model from the config saved in it, and
// prints the prompt followed by sampled text. One process; no mpirun needed.
#include <filesystem>
#include <memory>
#include <string>

#include "src/cli/checkpoint_option.h"
#include "src/cli/commands.h"
#include "src/cli/option_checks.h"
#include "src/cli/terminal_text.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/data/tokenizer.h"
#include "wallfacer/models/generate.h"
#include "wallfacer/train/checkpoint.h"

namespace wf::cli {
namespace {

// Sampling is one token at a time on the CPU: a million tokens takes hours already, so a larger
// --tokens is a typo, not a plan.
constexpr std::int64_t kMaxNewTokens = 1'000'000;

struct GenerateCommandOptions {
  std::string checkpoint;
  std::string prompt = "\n";
  std::string gpt2_dir = "data/gpt2";
  models::GenerateOptions sampling;
};

int generate(const GenerateCommandOptions& o) {
  // A newer checkpoint whose saved config does not load is skipped for the previous one, with a warning.
  const auto [checkpoint, config] = load_checkpoint_and_config(o.checkpoint);
  comm::CommGrid grid(comm::ProcessGrid(config.parallel.grid(), 1, 0));
  const std::shared_ptr<models::Model> model = models::create(config, grid);
  models::require_logits(*model);  // before loading weights a model cannot use
  // The model is built from the checkpoint's own config, so a mismatch means the checkpoint is
  // damaged or from another build: named here with its files and tensors, as load_state_dict's
  // message is about module code ("strict=false"), not about a command line.
  train::check_model_fits(checkpoint, *model);
  model->load_state_dict(checkpoint.model);

  const auto tokenizer = data::make_tokenizer(config::tokenizer_name(config.data.tokenizer), o.gpt2_dir);
  WF_CHECK(tokenizer->vocab_size() <= model->vocab_size(),
           "generate: the {} tokenizer has {} tokens but the model only {}", tokenizer->name(),
           tokenizer->vocab_size(), model->vocab_size());
  // The text streams out as it is sampled: the prompt, then each token as soon as it is drawn
  // (a character cut between two tokens is held back until it is whole).
  const std::vector<std::uint32_t> prompt = tokenizer->encode(o.prompt);
  TextPrinter printer(stdout_is_terminal());
  printer.print(tokenizer->decode(prompt));
  models::generate(*model, prompt, o.sampling,
                   [&](std::uint32_t token) { printer.print(tokenizer->decode(std::vector<std::uint32_t>{token})); });
  printer.print("\n");
  printer.finish();
  return kExitOk;
}

}  // namespace

void add_generate_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("generate", "Sample text from a trained model's checkpoint");
  auto options = std::make_shared<GenerateCommandOptions>();
  command->add_option("--checkpoint", options->checkpoint, "checkpoint.dir of a run (newest checkpoint) or a step-* dir")
      ->required();
  command->add_option("--prompt", options->prompt, "Text to continue")->capture_default_str();
  command->add_option("--tokens", options->sampling.max_new_tokens, "Tokens to sample")
      ->check(in_range(std::int64_t{1}, kMaxNewTokens, "a run samples 1 to a million new tokens"))
      ->capture_default_str();
  // non_negative() also refuses nan and inf, which would make every probability NaN.
  command->add_option("--temperature", options->sampling.temperature, "Softmax temperature; 0 = greedy")
      ->check(non_negative())
      ->capture_default_str();
  command->add_option("--top-k", options->sampling.top_k, "Sample among the k likeliest tokens; 0 = all")
      ->check(non_negative())
      ->capture_default_str();
  command->add_option("--seed", options->sampling.seed, "Sampling seed")->capture_default_str();
  command->add_option("--gpt2-dir", options->gpt2_dir, "encoder.json and vocab.bpe, for GPT-2 tokenized models")
      ->capture_default_str();
  set_action(*command, [options] { return comm::run_main(0, nullptr, [&] { return generate(*options); }); });
}

}  // namespace wf::cli
