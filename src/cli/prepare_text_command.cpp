// `wallfacer prepare-text`: text files -> DIR/train.bin + DIR/val.bin token files (see docs/data.md).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "src/cli/commands.h"
#include "src/cli/option_checks.h"
#include "wallfacer/core/error.h"
#include "wallfacer/data/token_file.h"
#include "wallfacer/data/tokenizer.h"

namespace wf::cli {
namespace {

struct PrepareTextOptions {
  std::vector<std::string> inputs;
  std::string output_dir;
  std::string tokenizer;
  std::string gpt2_dir = "data/gpt2";
  double val_fraction = 0.1;
};

// Checked for every input before any is read, so that a typo in the last file name fails at
// once rather than after minutes of tokenizing.
void check_input(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  WF_CHECK(fs::exists(path, ec), "prepare-text: input file '{}' does not exist", path);
  WF_CHECK(fs::is_regular_file(path, ec), "prepare-text: input '{}' is not a regular file", path);
  WF_CHECK(fs::file_size(path, ec) > 0 && !ec, "prepare-text: input file '{}' is empty", path);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  WF_CHECK(in.good(), "prepare-text: cannot read input file '{}' (check its permissions)", path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  WF_CHECK(!in.bad(), "prepare-text: reading input file '{}' failed", path);
  WF_CHECK(!text.empty(), "prepare-text: input file '{}' is empty", path);
  return text;
}

int run(const PrepareTextOptions& o) {
  for (const std::string& path : o.inputs) check_input(path);
  const auto tokenizer = data::make_tokenizer(o.tokenizer, o.gpt2_dir);
  // The files are concatenated as they are, with no separator token: put the boundaries you
  // want (blank lines, say) into the text itself.
  std::vector<std::uint32_t> tokens;
  for (const std::string& path : o.inputs) {
    const std::vector<std::uint32_t> file_tokens = tokenizer->encode(read_text(path));
    tokens.insert(tokens.end(), file_tokens.begin(), file_tokens.end());
  }
  const auto total = static_cast<std::int64_t>(tokens.size());
  const auto val_count = static_cast<std::int64_t>(std::floor(static_cast<double>(total) * o.val_fraction));
  const std::int64_t train_count = total - val_count;
  WF_CHECK(train_count > 0, "prepare-text: {} tokens leave none for training at --val-fraction {}", total,
           o.val_fraction);

  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(o.output_dir, ec);
  WF_CHECK(!ec, "prepare-text: cannot create output directory '{}': {}", o.output_dir, ec.message());
  const std::string train_path = (fs::path(o.output_dir) / "train.bin").string();
  const std::string val_path = (fs::path(o.output_dir) / "val.bin").string();
  const std::vector<std::uint32_t> val(tokens.begin() + train_count, tokens.end());
  tokens.resize(static_cast<std::size_t>(train_count));
  data::write_token_file(train_path, tokens, tokenizer->vocab_size());
  data::write_token_file(val_path, val, tokenizer->vocab_size());

  const int width = data::token_bytes_for_vocab(tokenizer->vocab_size());
  std::printf("tokenizer %s (vocab %lld, uint%d tokens), %zu input file(s)\n", tokenizer->name().c_str(),
              static_cast<long long>(tokenizer->vocab_size()), width * 8, o.inputs.size());
  std::printf("%s: %lld tokens\n%s: %lld tokens\n", train_path.c_str(), static_cast<long long>(train_count),
              val_path.c_str(), static_cast<long long>(val_count));
  return kExitOk;
}

}  // namespace

void add_prepare_text_command(CLI::App& app) {
  auto o = std::make_shared<PrepareTextOptions>();
  CLI::App* command =
      app.add_subcommand("prepare-text", "Tokenize text files into train.bin and val.bin token files for GPT training");
  command->add_option("--input", o->inputs, "Text files (UTF-8), concatenated in this order")->required()->expected(1, -1);
  command->add_option("--output-dir", o->output_dir, "Directory for train.bin and val.bin (created if needed)")
      ->required();
  command->add_option("--tokenizer", o->tokenizer, "byte (vocab 256) or gpt2 (GPT-2 BPE, vocab 50257)")
      ->required()
      ->check(CLI::IsMember({"byte", "gpt2"}));
  command->add_option("--gpt2-dir", o->gpt2_dir, "encoder.json + vocab.bpe (scripts/fetch-gpt2-bpe.sh fetches them)")
      ->capture_default_str();
  command->add_option("--val-fraction", o->val_fraction, "The last fraction of the tokens, held out as val.bin")
      ->check(in_range(0.0, 0.99))
      ->capture_default_str();
  set_action(*command, [o] { return run(*o); });
}

}  // namespace wf::cli
