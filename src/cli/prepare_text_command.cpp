// `wallfacer prepare-text`: documents (text or JSON Lines, files or folders) -> DIR/train.bin and
// DIR/val.bin token files with their document indexes train.docs and val.docs (see docs/data.md).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "src/cli/commands.h"
#include "src/cli/option_checks.h"
#include "wallfacer/core/error.h"
#include "wallfacer/data/prepare_text.h"
#include "wallfacer/data/token_file.h"

namespace wf::cli {
namespace {

struct PrepareTextCommandOptions {
  data::PrepareTextOptions prepare;
  std::string tokenizer;
  std::string gpt2_dir = "data/gpt2";
  std::string format = "text";
  std::string separator;
  CLI::Option* separator_option = nullptr;
  CLI::Option* text_key_option = nullptr;
};

void print_split(const data::PreparedSplit& split) {
  std::printf("%s: %lld tokens, %lld documents (index %s)\n", split.tokens_path.c_str(),
              static_cast<long long>(split.tokens), static_cast<long long>(split.documents), split.index_path.c_str());
}

int run(PrepareTextCommandOptions& o) {
  data::PrepareTextOptions& p = o.prepare;
  p.read.format = o.format == "jsonl" ? data::DocumentFormat::jsonl : data::DocumentFormat::text;
  WF_USER_CHECK(p.read.format == data::DocumentFormat::text || o.separator_option->count() == 0,
                "prepare-text: --separator splits text files; a JSON Lines record is one document already");
  WF_USER_CHECK(p.read.format == data::DocumentFormat::jsonl || o.text_key_option->count() == 0,
                "prepare-text: --text-key names the key of JSON Lines records; add --format jsonl");
  if (o.separator_option->count() > 0) p.read.separator = data::unescape_separator(o.separator);
  p.progress = stderr;
  const auto tokenizer = data::make_tokenizer(o.tokenizer, o.gpt2_dir);
  const data::PrepareTextResult r = data::prepare_text(p, *tokenizer);

  const int width = data::token_bytes_for_vocab(tokenizer->vocab_size());
  std::printf("tokenizer %s (vocab %lld, uint%d tokens, %s), %zu input file(s)\n", tokenizer->name().c_str(),
              static_cast<long long>(tokenizer->vocab_size()), width * 8,
              r.end_of_text ? fmt::format("end-of-text token {} after each document", *r.end_of_text).c_str()
                            : "no end-of-text token",
              r.files.size());
  std::printf("%lld documents, %lld empty ones skipped, %s\n", static_cast<long long>(r.read.documents),
              static_cast<long long>(r.read.empty_skipped), r.read.bad.summary().c_str());
  for (const std::string& example : r.read.bad.examples) {
    std::fprintf(stderr, "prepare-text: skipped %s\n", example.c_str());
  }
  if (r.cut_single_document) {
    std::fprintf(stderr,
                 "prepare-text: the input is one document, so the validation set is its last %lld tokens; give more "
                 "documents (--separator, one file each, or JSON Lines) to keep validation documents whole\n",
                 static_cast<long long>(r.val.tokens));
  }
  print_split(r.train);
  print_split(r.val);
  return kExitOk;
}

}  // namespace

void add_prepare_text_command(CLI::App& app) {
  auto o = std::make_shared<PrepareTextCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "prepare-text", "Tokenize documents into train.bin and val.bin token files with their document indexes");
  command
      ->add_option("--input", o->prepare.inputs,
                   "Text or JSON Lines files (UTF-8, gzipped or not) and folders of them, read in this order")
      ->required()
      ->expected(1, -1);
  command->add_option("--output-dir", o->prepare.output_dir, "Directory for train.bin, val.bin and their .docs indexes")
      ->required();
  command->add_option("--tokenizer", o->tokenizer, "byte (vocab 256) or gpt2 (GPT-2 BPE, vocab 50257)")
      ->required()
      ->check(CLI::IsMember({"byte", "gpt2"}));
  command->add_option("--gpt2-dir", o->gpt2_dir, "encoder.json + vocab.bpe (scripts/fetch-gpt2-bpe.sh fetches them)")
      ->capture_default_str();
  command
      ->add_option("--format", o->format,
                   "text: one document per file (or per --separator); jsonl: one per line, the string under "
                   "--text-key. Folders contribute *.txt[.gz] or *.jsonl[.gz]")
      ->check(CLI::IsMember({"text", "jsonl"}))
      ->capture_default_str();
  o->separator_option = command->add_option(
      "--separator", o->separator, "text: split each file into documents on this text (escapes \\n \\r \\t \\\\)");
  o->text_key_option = command->add_option("--text-key", o->prepare.read.text_key, "jsonl: the key holding the text")
                           ->capture_default_str();
  command
      ->add_option("--max-bad-records", o->prepare.read.max_bad_records,
                   "Records that cannot be read (invalid JSON or UTF-8, a missing or non-string key) skipped and "
                   "counted before the command stops")
      ->check(in_range<std::int64_t>(0, INT64_MAX))
      ->capture_default_str();
  command
      ->add_option("--val-fraction", o->prepare.val_fraction,
                   "About this fraction of the tokens, the last whole documents, held out as val.bin")
      ->check(in_range(0.0, 0.99))
      ->capture_default_str();
  set_action(*command, [o] { return run(*o); });
}

}  // namespace wf::cli
