// The batch loader, single process: every (dp, sp) rank is simulated by its own loader, and
// what the ranks hold together is checked against the windows read straight from the source.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "data/data_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/data/loader.h"
#include "wallfacer/data/token_file.h"

using namespace wf::data;
using wf::Tensor;
using wf::parallel::SequenceLayout;
using wf::parallel::SpShard;
using wf::data::testing::TempDir;
using Catch::Matchers::Contains;

namespace {

using Tokens = std::vector<std::int64_t>;

Tokens values(const Tensor& t) { return t.to_vector<std::int64_t>(); }

Tokens read_tokens(const TokenSource& source, std::int64_t start, std::int64_t count) {
  Tokens out(static_cast<std::size_t>(count));
  source.read(start, count, out.data());
  return out;
}

LoaderOptions options_of(std::int64_t N, std::int64_t mbs, std::int64_t ga, int dp, int dp_rank,
                         SpShard shard = {}, std::uint64_t seed = 7) {
  if (shard.seq_len == 0) shard.seq_len = N;
  return {.seq_len = N, .micro_batch_size = mbs, .grad_accum_steps = ga, .dp_size = dp, .dp_rank = dp_rank,
          .shard = shard, .seed = seed};
}

// The samples (window indices) a loader's stream holds at [first, first + n).
Tokens stream(const BatchLoader& loader, std::int64_t first, std::int64_t n) {
  Tokens out;
  for (std::int64_t i = first; i < first + n; ++i) out.push_back(loader.sample_at(i));
  return out;
}

bool same_batch(const Batch& a, const Batch& b) {
  return values(a.inputs) == values(b.inputs) && values(a.targets) == values(b.targets) &&
         values(a.positions) == values(b.positions) && a.samples == b.samples && a.global_tokens == b.global_tokens;
}

}  // namespace

TEST_CASE("loader: the (dp, sp) ranks' slices reassemble each global batch with true positions", "[data][loader]") {
  constexpr std::int64_t N = 24, mbs = 2, ga = 2;  // N: a multiple of every layout's P and 2T below
  // 10 full windows (+ 4 spare tokens): a step of 8 samples at dp 2 straddles two epochs.
  const auto source = make_synthetic_source(1000, 10 * N + 5, 3);
  for (SequenceLayout layout : {SequenceLayout::zigzag, SequenceLayout::contiguous}) {
    for (int dp : {1, 2}) {
      for (int P : {1, 2, 4}) {
        for (int C : {1, 2}) {
          if (P % C != 0) continue;
          INFO(fmt::format("{} dp {} sp {} C {}", wf::parallel::sequence_layout_name(layout), dp, P, C));
          std::vector<std::vector<BatchLoader>> loaders(static_cast<std::size_t>(dp));
          for (int r = 0; r < dp; ++r) {
            for (int l = 0; l < P; ++l) {
              loaders[r].emplace_back(source, options_of(N, mbs, ga, dp, r, SpShard{layout, N, P, C, l}));
            }
          }
          REQUIRE(loaders[0][0].samples_per_epoch() == 10);
          for (std::int64_t step = 0; step < 3; ++step) {
            for (std::int64_t micro = 0; micro < ga; ++micro) {
              for (int r = 0; r < dp; ++r) {
                std::vector<Tensor> inputs, targets;
                std::vector<Batch> batches;
                for (int l = 0; l < P; ++l) {
                  Batch batch = loaders[r][l].get(step, micro);
                  CHECK(batch.inputs.shape() == wf::Shape{mbs, N / P});
                  CHECK(batch.targets.shape() == wf::Shape{mbs, N / P});
                  CHECK(values(batch.positions) == wf::parallel::position_ids(layout, N, P, C, l));
                  CHECK(batch.global_tokens == mbs * dp * ga * N);
                  inputs.push_back(batch.inputs);
                  targets.push_back(batch.targets);
                  batches.push_back(std::move(batch));
                }
                // The rows are the stream's samples at the documented indices, on every sp rank.
                Tokens expected_samples;
                for (std::int64_t b = 0; b < mbs; ++b) {
                  expected_samples.push_back(loaders[r][0].sample_at(((step * ga + micro) * dp + r) * mbs + b));
                }
                for (const Batch& batch : batches) CHECK(batch.samples == expected_samples);
                // Reassembled, the ranks hold exactly the windows: inputs [w·N, w·N + N), targets one later.
                Tokens want_inputs, want_targets;
                for (std::int64_t w : expected_samples) {
                  const Tokens window = read_tokens(*source, w * N, N + 1);
                  want_inputs.insert(want_inputs.end(), window.begin(), window.end() - 1);
                  want_targets.insert(want_targets.end(), window.begin() + 1, window.end());
                }
                const Tokens got_inputs = values(wf::parallel::unshard_sequence(inputs, layout, P, C));
                const Tokens got_targets = values(wf::parallel::unshard_sequence(targets, layout, P, C));
                CHECK(got_inputs == want_inputs);
                CHECK(got_targets == want_targets);
                // Independently of unshard: each local token sits at its stated position, and its
                // target is the input at the next true position.
                for (int l = 0; l < P; ++l) {
                  const Tokens pos = values(batches[l].positions), in = values(batches[l].inputs),
                               tg = values(batches[l].targets);
                  for (std::int64_t b = 0; b < mbs; ++b) {
                    for (std::size_t j = 0; j < pos.size(); ++j) {
                      const std::size_t k = static_cast<std::size_t>(b * (N / P)) + j;
                      const std::size_t g = static_cast<std::size_t>(b * N + pos[j]);
                      CHECK(in[k] == want_inputs[g]);
                      if (pos[j] + 1 < N) CHECK(tg[k] == want_inputs[g + 1]);
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("loader: seeded order, every sample once per epoch, natural order without shuffle", "[data][loader]") {
  constexpr std::int64_t N = 8;
  const auto source = make_synthetic_source(50, 37 * N + 1, 11);  // 37 samples: prime, not a batch multiple
  const BatchLoader a(source, options_of(N, 2, 3, 2, 0, {}, 100));
  const BatchLoader same(source, options_of(N, 2, 3, 2, 1, {}, 100));  // another dp rank, same stream
  const BatchLoader other(source, options_of(N, 2, 3, 2, 0, {}, 101));
  REQUIRE(a.samples_per_epoch() == 37);
  Tokens identity(37);
  std::iota(identity.begin(), identity.end(), 0);
  for (std::int64_t e = 0; e < 4; ++e) {
    Tokens epoch = stream(a, e * 37, 37);
    CHECK(epoch != identity);  // shuffled (chance of the identity: 1 / 37!)
    CHECK(epoch == stream(same, e * 37, 37));
    CHECK(epoch != stream(other, e * 37, 37));
    CHECK(epoch != stream(a, ((e + 1) % 4) * 37, 37));  // each epoch its own order
    std::sort(epoch.begin(), epoch.end());
    CHECK(epoch == identity);
  }
  // 12 samples per step: step 3 starts at stream index 36, the last sample of epoch 0.
  CHECK(a.global_batch_size() == 12);
  CHECK(a.epoch(0) == 0);
  CHECK(a.epoch(3) == 0);
  CHECK(a.epoch(4) == 1);
  CHECK(a.stream_index(2, 1, 1) == ((2 * 3 + 1) * 2 + 0) * 2 + 1);
  CHECK(same.stream_index(2, 1, 1) == ((2 * 3 + 1) * 2 + 1) * 2 + 1);

  LoaderOptions natural = options_of(N, 2, 3, 2, 0);
  natural.shuffle = false;
  const BatchLoader plain(source, natural);
  CHECK(stream(plain, 0, 37) == identity);
  CHECK(stream(plain, 37, 37) == identity);
  CHECK(plain.get(0, 0).samples == Tokens{0, 1});
  CHECK(plain.get(0, 1).samples == Tokens{4, 5});  // dp rank 1 has 2, 3
}

TEST_CASE("loader: epoch permutations are pinned, so every platform trains on the same order", "[data][loader]") {
  // Golden values, also produced by an independent Python transcription of the documented
  // algorithm (docs/data.md): a change here changes the data order of every run, resumed ones too.
  CHECK(epoch_permutation(10, 1234, 0) == Tokens{8, 5, 6, 4, 3, 7, 0, 1, 2, 9});
  CHECK(epoch_permutation(10, 1234, 1) == Tokens{1, 3, 0, 5, 7, 2, 9, 8, 4, 6});
  CHECK(epoch_permutation(0, 1, 0).empty());
  CHECK(epoch_permutation(1, 1, 5) == Tokens{0});
}

TEST_CASE("loader: a fresh loader resumes at any step with the batches of an uninterrupted walk", "[data][loader]") {
  constexpr std::int64_t N = 16;
  const auto source = make_synthetic_source(300, 23 * N + 1, 5);
  const SpShard shard{SequenceLayout::zigzag, N, 4, 2, 3};
  const LoaderOptions o = options_of(N, 3, 2, 2, 1, shard, 9);
  const BatchLoader walker(source, o);
  std::vector<Batch> walked;  // steps 0..9: a walk across several epochs (12 samples a step, 23 an epoch)
  for (std::int64_t step = 0; step < 10; ++step) {
    for (std::int64_t micro = 0; micro < 2; ++micro) walked.push_back(walker.get(step, micro));
  }
  for (std::int64_t step : {9, 0, 7, 3}) {  // fresh loaders, in any order
    const BatchLoader resumed(source, o);
    for (std::int64_t micro = 1; micro >= 0; --micro) {
      CHECK(same_batch(resumed.get(step, micro), walked[static_cast<std::size_t>(step * 2 + micro)]));
    }
  }
  // Steps far past the first epochs too.
  const BatchLoader late(source, o);
  CHECK(same_batch(late.get(1000, 1), walker.get(1000, 1)));
}

TEST_CASE("synthetic source: seeded, in range, the same however it is read", "[data][loader]") {
  const auto s = make_synthetic_source(8, 80000, 42);
  CHECK(s->size() == 80000);
  CHECK_THAT(s->describe(), Contains("synthetic") && Contains("seed 42"));
  const Tokens all = read_tokens(*s, 0, 80000);
  CHECK(all == read_tokens(*make_synthetic_source(8, 80000, 42), 0, 80000));
  CHECK(all != read_tokens(*make_synthetic_source(8, 80000, 43), 0, 80000));
  // Chunked reads at odd offsets give the same tokens.
  Tokens chunked;
  for (std::int64_t start = 0, len = 1; start < 80000; start += len, len = len * 3 % 1001 + 1) {
    const Tokens part = read_tokens(*s, start, std::min<std::int64_t>(len, 80000 - start));
    chunked.insert(chunked.end(), part.begin(), part.end());
  }
  CHECK(chunked == all);
  // Uniform over the vocabulary: each count within 5 standard deviations of 10000.
  std::vector<std::int64_t> counts(8, 0);
  for (std::int64_t t : all) {
    REQUIRE(t >= 0);
    REQUIRE(t < 8);
    ++counts[static_cast<std::size_t>(t)];
  }
  for (std::int64_t c : counts) CHECK(std::abs(c - 10000) < 500);
  // Any length in O(1) memory: read near the end of 2^50 tokens, ids in a GPT-2-sized vocabulary.
  const auto huge = make_synthetic_source(50257, std::int64_t{1} << 50, 1);
  for (std::int64_t t : read_tokens(*huge, (std::int64_t{1} << 50) - 100, 100)) CHECK((t >= 0 && t < 50257));
  Tokens none;
  CHECK_THROWS_WITH(s->read(79990, 11, none.data()), Contains("out of range") && Contains("synthetic"));
  CHECK_THROWS_WITH(make_synthetic_source(0, 10, 1), Contains("vocab_size"));
}

TEST_CASE("token file source: reads files of the existing writer, uint16 and uint32", "[data][loader]") {
  TempDir dir;
  for (std::int64_t vocab : {300, 70000}) {
    const std::string path = dir.file(fmt::format("tokens{}.bin", vocab));
    std::vector<std::uint32_t> tokens(97);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint32_t>((i * 7919 + 13) % vocab);
    write_token_file(path, tokens, vocab);
    const auto source = open_token_file_source(path);
    CHECK(source->size() == 97);
    CHECK_THAT(source->describe(), Contains(path));
    const Tokens got = read_tokens(*source, 0, 97);
    CHECK(got == Tokens(tokens.begin(), tokens.end()));
    CHECK(read_tokens(*source, 40, 5) == Tokens(tokens.begin() + 40, tokens.begin() + 45));
    // Through the loader, unshuffled: 96 tokens of 12 windows of 8, the last target the 97th token.
    LoaderOptions o = options_of(8, 4, 1, 1, 0);
    o.shuffle = false;
    const BatchLoader loader(source, o);
    CHECK(loader.samples_per_epoch() == 12);
    const Batch batch = loader.get(2, 0);  // samples 8..11: the last four windows
    CHECK(values(batch.inputs) == Tokens(tokens.begin() + 64, tokens.begin() + 96));
    CHECK(values(batch.targets) == Tokens(tokens.begin() + 65, tokens.begin() + 97));
  }
}

TEST_CASE("token file source: a file truncated while read is an error naming it, not a SIGBUS", "[data][loader]") {
  TempDir dir;
  const std::string path = dir.file("shrinks.bin");
  // 64 Ki uint16 tokens: 128 KiB, many pages, so most of the mapping lies past the new end.
  std::vector<std::uint32_t> tokens(1 << 16);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint32_t>(i % 300);
  write_token_file(path, tokens, 300);
  const auto source = open_token_file_source(path);
  LoaderOptions o = options_of(8, 4, 1, 1, 0);
  o.shuffle = false;
  const BatchLoader loader(source, o);
  CHECK(values(loader.get(0, 0).inputs) == Tokens(tokens.begin(), tokens.begin() + 32));

  // Another process truncates it in place (a read of the mapping past the new end would fault).
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, 4096) == 0);
  ::close(fd);
  const std::string shrank = fmt::format("token file '{}' shrank to 4096 bytes while this run reads it (it had "
                                         "131096 when opened)",
                                         path);
  CHECK_THROWS_WITH(read_tokens(*source, 60000, 100), Contains(shrank) && Contains("prepare-text"));
  CHECK_THROWS_WITH(loader.get(1000, 0), Contains(shrank));  // through the loader, past the new end
  CHECK_THROWS_WITH(loader.get(0, 0), Contains(shrank));     // even a read within what is left
  CHECK_THROWS_AS(loader.get(0, 0), wf::Error);
}

TEST_CASE("loader: a too-short source and inconsistent options are errors that say what to fix", "[data][loader]") {
  TempDir dir;
  const std::string path = dir.file("short.bin");
  write_token_file(path, std::vector<std::uint32_t>(16, 1), 256);
  const auto source = open_token_file_source(path);
  CHECK_THROWS_WITH(BatchLoader(source, options_of(16, 1, 1, 1, 0)),
                    Contains(path) && Contains("16 tokens") && Contains("seq_len 16") && Contains("17 tokens") &&
                        Contains("shorter train.seq_len or more data"));
  CHECK(BatchLoader(source, options_of(15, 1, 1, 1, 0)).samples_per_epoch() == 1);  // 16 = 15 + 1: one window
  CHECK_THROWS_WITH(BatchLoader(make_synthetic_source(10, 0, 1), options_of(4, 1, 1, 1, 0)),
                    Contains("synthetic") && Contains("0 tokens"));

  const auto synthetic = make_synthetic_source(10, 1000, 1);
  CHECK_THROWS_WITH(BatchLoader(synthetic, options_of(0, 1, 1, 1, 0)), Contains("seq_len is 0"));
  CHECK_THROWS_WITH(BatchLoader(synthetic, options_of(8, 0, 1, 1, 0)), Contains("micro_batch_size is 0"));
  CHECK_THROWS_WITH(BatchLoader(synthetic, options_of(8, 1, 1, 2, 2)), Contains("dp_rank 2"));
  CHECK_THROWS_WITH(BatchLoader(synthetic, options_of(8, 1, 1, 1, 0, SpShard{SequenceLayout::zigzag, 16, 2, 1, 0})),
                    Contains("16 tokens but seq_len is 8"));
  CHECK_THROWS(BatchLoader(synthetic, options_of(12, 1, 1, 1, 0, SpShard{SequenceLayout::zigzag, 12, 4, 1, 0})));
  const BatchLoader loader(synthetic, options_of(8, 1, 2, 1, 0));
  CHECK_THROWS_WITH(loader.get(0, 2), Contains("micro batch 2"));
  CHECK_THROWS_WITH(loader.get(-1, 0), Contains("step -1"));
}
