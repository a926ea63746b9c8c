// Packed documents in the batch loader: every (sp) rank's positions inside documents and each
// row's document boundaries against a reference built from the document list, for the contiguous
// and zigzag layouts (P = 1, 2, 4, C = 1, 2); the zigzag of a packed batch is the one balanced by
// its documents' work (sequence_layout.h's document_chunks), the tokens are the window's at the
// positions it gives, and a fresh loader resumes at any step.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "wallfacer/core/error.h"
#include "wallfacer/data/loader.h"
#include "wallfacer/data/packing.h"

using namespace wf::data;
using wf::parallel::SequenceLayout;
using wf::parallel::SpShard;
using Catch::Matchers::Contains;

namespace {

using Values = std::vector<std::int64_t>;

// Token i is i mod 1000; the documents have the given lengths, one after another.
class DocumentSource final : public TokenSource {
 public:
  explicit DocumentSource(const Values& lengths) {
    index_->token_count = std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
    std::int64_t start = 0;
    for (const std::int64_t length : lengths) {
      index_->starts.push_back(start);
      start += length;
    }
  }
  std::int64_t size() const override { return index_->token_count; }
  void read(std::int64_t start, std::int64_t count, std::int64_t* out) const override {
    REQUIRE((start >= 0 && start + count <= size()));
    for (std::int64_t k = 0; k < count; ++k) out[k] = (start + k) % 1000;
  }
  std::string describe() const override { return "test documents"; }
  std::shared_ptr<const DocumentIndex> documents() const override { return index_; }
  const DocumentIndex& index() const { return *index_; }

 private:
  std::shared_ptr<DocumentIndex> index_ = std::make_shared<DocumentIndex>();
};

// The reference, token by token from the document list: the document holding token t is the last
// one starting at or before it.
std::int64_t document_start(const DocumentIndex& index, std::int64_t t) {
  std::int64_t start = 0;
  for (const std::int64_t s : index.starts) {
    if (s <= t) start = s;
  }
  return start;
}

Values reference_bounds(const DocumentIndex& index, std::int64_t window_start, std::int64_t N) {
  Values bounds{0};
  for (std::int64_t p = 1; p < N; ++p) {
    if (document_start(index, window_start + p) == window_start + p) bounds.push_back(p);
  }
  bounds.push_back(N);
  return bounds;
}

std::int64_t reference_position(const DocumentIndex& index, std::int64_t window_start, std::int64_t p) {
  return window_start + p - std::max(document_start(index, window_start + p), window_start);
}

LoaderOptions packed(std::int64_t N, SpShard shard, bool pack = true) {
  shard.seq_len = N;
  return {.seq_len = N, .micro_batch_size = 2, .grad_accum_steps = 2, .dp_size = 1, .dp_rank = 0, .shard = shard,
          .seed = 11, .shuffle = true, .pack = pack};
}

Values row(const wf::Tensor& t, std::int64_t b) {
  const Values all = t.to_vector<std::int64_t>();
  const auto n = static_cast<std::int64_t>(all.size()) / t.shape()[0];
  return Values(all.begin() + b * n, all.begin() + (b + 1) * n);
}

}  // namespace

TEST_CASE("packing: a window's document bounds and positions inside documents, by hand", "[data][packing]") {
  const DocumentSource source({3, 5, 1, 7});  // starts 0, 3, 8, 9; 16 tokens
  CHECK(window_document_bounds(source.index(), 0, 8) == Values{0, 3, 8});
  CHECK(window_document_bounds(source.index(), 8, 8) == Values{0, 1, 8});  // a document starting with the window
  CHECK(window_document_bounds(source.index(), 4, 8) == Values{0, 4, 5, 8});
  Values positions(8);
  document_positions({0, 3, 8}, {0, 1, 2, 3, 4, 5, 6, 7}, positions.data());
  CHECK(positions == Values{0, 1, 2, 0, 1, 2, 3, 4});
  document_positions({0, 1, 8}, {7, 0, 3, 1}, positions.data());  // any order (zigzag)
  CHECK(Values(positions.begin(), positions.begin() + 4) == Values{6, 0, 2, 0});
}

TEST_CASE("packing: every sp rank's positions inside documents and each row's bounds match the document list",
          "[data][packing]") {
  constexpr std::int64_t N = 24;
  // One-token documents, documents shorter than, equal to and longer than a sequence (and than a
  // rank's chunk), a document spanning several sequences.
  const auto source = std::make_shared<DocumentSource>(
      Values{1, 1, 1, 5, 24, 2, 50, 1, 9, 24, 3, 3, 1, 70, 6, 1, 1, 17, 24, 12});
  int rearranged = 0;
  for (SequenceLayout layout : {SequenceLayout::zigzag, SequenceLayout::contiguous}) {
    for (int P : {1, 2, 4}) {
      for (int C : {1, 2}) {
        if (P % C != 0) continue;
        for (int l = 0; l < P; ++l) {
          INFO(fmt::format("{} sp {} C {} rank {}", wf::parallel::sequence_layout_name(layout), P, C, l));
          const SpShard shard{layout, N, P, C, l};
          const BatchLoader loader(source, packed(N, shard));
          const BatchLoader plain(source, packed(N, shard, false));
          const Values fixed = wf::parallel::run_positions(shard.runs());
          for (std::int64_t step = 0; step < 4; ++step) {
            for (std::int64_t micro = 0; micro < 2; ++micro) {
              const Batch batch = loader.get(step, micro);
              const Batch unpacked = plain.get(step, micro);
              // Packed, the layout follows the batch's documents (the attention strategies derive
              // the same from doc_bounds): the zigzag balanced by their work.
              const auto chunks = wf::parallel::document_chunks(layout, batch.doc_bounds, N, P, C);
              const Values positions = wf::parallel::position_ids(layout, N, P, C, l, 1, chunks.get());
              if (positions != fixed) ++rearranged;
              REQUIRE(batch.positions.to_vector<std::int64_t>() == positions);
              REQUIRE(unpacked.positions.to_vector<std::int64_t>() == fixed);
              REQUIRE(batch.samples == unpacked.samples);
              REQUIRE(batch.doc_positions.shape() == wf::Shape{2, static_cast<std::int64_t>(positions.size())});
              REQUIRE(batch.doc_bounds.size() == 2);
              for (std::int64_t b = 0; b < 2; ++b) {
                const std::int64_t window_start = batch.samples[static_cast<std::size_t>(b)] * N;
                const DocumentIndex& index = source->index();
                CHECK(batch.doc_bounds[static_cast<std::size_t>(b)] == reference_bounds(index, window_start, N));
                // The window's tokens at those positions (token t of the source is t mod 1000).
                Values expected, inputs, targets;
                for (const std::int64_t p : positions) {
                  expected.push_back(reference_position(index, window_start, p));
                  inputs.push_back((window_start + p) % 1000);
                  targets.push_back((window_start + p + 1) % 1000);
                }
                CHECK(row(batch.doc_positions, b) == expected);
                CHECK(row(batch.inputs, b) == inputs);
                CHECK(row(batch.targets, b) == targets);
                // Without packing: one document, the fixed layout.
                CHECK(unpacked.doc_bounds[static_cast<std::size_t>(b)] == Values{0, N});
                CHECK(row(unpacked.doc_positions, b) == fixed);
              }
            }
          }
        }
      }
    }
  }
  CHECK(rearranged > 0);  // some batches' documents did move the zigzag's chunks
}

TEST_CASE("packing: a fresh loader gives the batch of any step again", "[data][packing]") {
  constexpr std::int64_t N = 16;
  const auto source = std::make_shared<DocumentSource>(Values{3, 20, 1, 1, 16, 40, 7, 9, 2, 30});
  const SpShard shard{SequenceLayout::zigzag, N, 2, 1, 1};
  const BatchLoader walked(source, packed(N, shard));
  std::vector<Batch> walk;
  for (std::int64_t step = 0; step < 6; ++step) walk.push_back(walked.get(step, 1));  // past an epoch (8 windows)
  for (std::int64_t step : {5, 0, 3}) {
    const Batch fresh = BatchLoader(source, packed(N, shard)).get(step, 1);
    const Batch& before = walk[static_cast<std::size_t>(step)];
    CHECK(fresh.doc_positions.to_vector<std::int64_t>() == before.doc_positions.to_vector<std::int64_t>());
    CHECK(fresh.doc_bounds == before.doc_bounds);
    CHECK(fresh.inputs.to_vector<std::int64_t>() == before.inputs.to_vector<std::int64_t>());
    CHECK(fresh.samples == before.samples);
  }
}

TEST_CASE("packing: a source without documents, or with an index of other tokens, is refused", "[data][packing]") {
  constexpr std::int64_t N = 8;
  CHECK_THROWS_WITH(BatchLoader(make_synthetic_source(50, 100, 1), packed(N, {})),
                    Contains("synthetic tokens") && Contains("has no documents to pack"));
  CHECK_NOTHROW(BatchLoader(make_synthetic_source(50, 100, 1), packed(N, {}, false)));

  // An index whose token count is not the source's.
  class Mismatched final : public TokenSource {
   public:
    std::int64_t size() const override { return 20; }
    void read(std::int64_t, std::int64_t count, std::int64_t* out) const override { std::fill(out, out + count, 0); }
    std::string describe() const override { return "mismatched"; }
    std::shared_ptr<const DocumentIndex> documents() const override {
      return std::make_shared<DocumentIndex>(DocumentIndex{.token_count = 30, .starts = {0}, .end_of_text = {}});
    }
  };
  CHECK_THROWS_WITH(BatchLoader(std::make_shared<Mismatched>(), packed(N, {})),
                    Contains("the document index of mismatched is for 30 tokens, but the source holds 20"));
}
