#pragma once
// What `wallfacer prepare-text` does (docs/data.md): documents in, DIR/train.bin + DIR/train.docs
// and DIR/val.bin + DIR/val.docs out. Each document is tokenized on its own and followed by the
// tokenizer's end-of-text token where it has one; the validation set is the last whole documents.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "wallfacer/data/documents.h"
#include "wallfacer/data/tokenizer.h"

namespace wf::data {

struct PrepareTextOptions {
  std::vector<std::string> inputs;  // files and folders (list_document_files)
  DocumentReadOptions read;
  std::string output_dir;
  double val_fraction = 0.1;
  // Progress lines (documents, tokens, bytes read, an ETA) at most every progress_seconds, the
  // first after that long: a short run prints none. nullptr: none.
  std::FILE* progress = nullptr;
  double progress_seconds = 5.0;
};

struct PreparedSplit {
  std::string tokens_path, index_path;
  std::int64_t tokens = 0, documents = 0;
};

struct PrepareTextResult {
  std::vector<std::string> files;  // read, in this order
  DocumentReadTotals read;
  PreparedSplit train, val;
  std::optional<std::uint32_t> end_of_text;  // appended after every document
  // The input was a single document and val_fraction > 0: its last tokens are the validation set
  // (the one split that is not at a document boundary; both indexes then hold one document).
  bool cut_single_document = false;
};

// The token where the validation set starts, for documents starting at `starts` (0 first,
// increasing) in `total` tokens: the document start that leaves the validation set closest to
// floor(val_fraction · total) tokens (ties: the smaller set), at least one document each side;
// `total` when that count is 0; inside the document when there is only one (see
// cut_single_document).
std::int64_t validation_start(const std::vector<std::int64_t>& starts, std::int64_t total, double val_fraction);

// Reads, tokenizes, splits and writes (each file atomically). wf::Error naming the input and the
// fix for what read_documents refuses, no documents at all, or no training tokens left.
PrepareTextResult prepare_text(const PrepareTextOptions& options, const Tokenizer& tokenizer);

}  // namespace wf::data
