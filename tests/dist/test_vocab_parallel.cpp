// Vocabulary parallelism (wallfacer/parallel/vocab_parallel.h) with the whole world as the tp
// group, against the single-process layers every rank can build: the embedding's shards are
// the whole table's rows (padding zeros), its lookup and weight gradient are the whole table's;
// the split cross-entropy's loss and logits gradient are the fused single-device kernel's, with
// ignored targets and with vocabularies that need padding at most world sizes (13 pads at 2,
// 3, 4 and 8 ranks — at 8 the last rank holds only padding —, 1001 at 2, 3, 4 and 8).
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "dist_testing.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/loss.h"
#include "wallfacer/ops/reduction.h"
#include "wallfacer/ops/shape_ops.h"
#include "wallfacer/parallel/tensor_parallel.h"
#include "wallfacer/parallel/vocab_parallel.h"

using wf::DType;
using wf::Shape;
using wf::Tensor;
using wf::parallel::LossReduction;
using namespace wf::test;

namespace {

constexpr DType kF64 = DType::f64;
constexpr std::uint64_t kInputSeed = 91, kWeightSeed = 92;

// Rows [start, start + length) of dim `dim`, as a fresh tensor.
Tensor part(const Tensor& t, std::int64_t dim, std::int64_t start, std::int64_t length) {
  return wf::narrow(t, dim, start, length).clone();
}

// How many of `rows` indices from `start` are below `real` (the rest are padding).
std::int64_t real_count(std::int64_t real, std::int64_t start, std::int64_t rows) {
  return std::clamp(real - start, std::int64_t{0}, rows);
}

}  // namespace

TEST_CASE("tp VocabParallelEmbedding holds the whole table's rows, padding zeros", "[dist][tp]") {
  auto group = world_group("t.tp.vocab.init");
  const int P = group->size(), me = group->rank();
  const wf::nn::EmbeddingOptions options{.num_embeddings = 13, .dim = 4, .init_std = 0.5, .seed = 7};
  const std::int64_t padded = wf::parallel::padded_vocab_size(13, P), rows = padded / P;
  CHECK(padded % P == 0);
  CHECK(padded - 13 < P);
  const wf::nn::Embedding whole(options);
  const wf::parallel::VocabParallelEmbedding shard(options, *group);

  const auto& s = shard.parameter_shard("weight");
  CHECK(s.dim == 0);
  CHECK(s.parts == P);
  CHECK(s.index == me);
  CHECK(s.group == "t.tp.vocab.init");
  CHECK(s.global_shape == Shape{padded, 4});
  CHECK(shard.weight().shape() == Shape{rows, 4});
  CHECK(shard.vocab_start() == me * rows);
  CHECK(shard.options().num_embeddings == 13);  // the whole table's options

  const std::int64_t real = real_count(13, me * rows, rows);
  if (real > 0) {
    CHECK(part(shard.weight(), 0, 0, real).to_vector<float>() ==
          part(whole.weight(), 0, me * rows, real).to_vector<float>());
  }
  if (real < rows) {
    CHECK(part(shard.weight(), 0, real, rows - real).to_vector<float>() ==
          std::vector<float>(static_cast<std::size_t>((rows - real) * 4), 0.0f));
  }
  CHECK(wf::parallel::padded_vocab_size(50257, 2) == 50258);
  CHECK(wf::parallel::padded_vocab_size(1001, 1) == 1001);
}

TEST_CASE("tp VocabParallelEmbedding: lookup and weight gradient equal the whole table's", "[dist][tp]") {
  auto group = world_group("t.tp.vocab.embed");
  const int me = group->rank();
  const wf::nn::EmbeddingOptions options{.num_embeddings = 13, .dim = 4, .init_std = 0.5, .seed = 8};
  wf::nn::Embedding whole(options);
  const auto layers = std::make_shared<wf::parallel::TensorParallelLayers>(*group);
  const auto made = layers->embedding(options, wf::nn::EmbeddingRole::vocabulary);
  auto* shard = dynamic_cast<wf::parallel::VocabParallelEmbedding*>(made.get());
  REQUIRE(shard != nullptr);  // the same on every rank
  CHECK(dynamic_cast<wf::parallel::VocabParallelEmbedding*>(
            layers->embedding(options, wf::nn::EmbeddingRole::replicated).get()) == nullptr);
  whole.to(kF64);
  shard->to(kF64);

  // Every id, some twice (the gradient of a repeated id accumulates), including the last one.
  std::vector<std::int64_t> id_values;
  for (std::int64_t i = 0; i < 18; ++i) id_values.push_back((i * 5 + 3) % 13);
  const Tensor ids = Tensor::from_vector(id_values, {3, 6});
  const Tensor y_whole = whole.forward(ids);
  const Tensor y_shard = shard->forward(ids.to(DType::i32));
  CHECK(mismatch(y_shard, y_whole) == "");  // one nonzero term per element: exact

  // The output is replicated: the same loss on every rank, counted once.
  const Tensor w = Tensor::randn_at(y_whole.shape(), kWeightSeed, 0, kF64);
  wf::sum(wf::mul(y_whole, w)).backward();
  wf::sum(wf::mul(y_shard, w)).backward();
  const std::int64_t rows = shard->weight().size(0), real = real_count(13, me * rows, rows);
  const Tensor g = shard->weight().grad();
  REQUIRE(g.defined());
  if (real > 0) CHECK(mismatch(part(g, 0, 0, real), part(whole.weight().grad(), 0, me * rows, real)) == "");
  if (real < rows) CHECK(mismatch(part(g, 0, real, rows - real), Tensor::zeros({rows - real, 4}, kF64)) == "");

  // Replicated ids: every rank throws before the all-reduce.
  CHECK_THROWS_WITH(shard->forward(Tensor::from_vector(std::vector<std::int64_t>{1, 13}, {2})),
                    Catch::Contains("id 13 at flat index 1 is outside [0, 13)"));
}

TEST_CASE("tp vocab_parallel_cross_entropy equals the single-device kernel on the whole logits", "[dist][tp]") {
  auto group = world_group("t.tp.vocab.loss");
  const int P = group->size(), me = group->rank();
  const std::pair<DType, double> precisions[] = {{kF64, 1e-12}, {DType::f32, 1e-5}};
  for (const std::int64_t vocab : {std::int64_t{13}, std::int64_t{1001}}) {
    for (const auto& [dtype, tolerance] : precisions) {
      for (const LossReduction reduction : {LossReduction::mean, LossReduction::sum}) {
        const bool sum = reduction == LossReduction::sum;
        INFO(fmt::format("vocab {} in {} ({}) on {} ranks", vocab, wf::dtype_name(dtype), sum ? "sum" : "mean", P));
        const std::int64_t padded = wf::parallel::padded_vocab_size(vocab, P), k = padded / P;
        const Shape lead{2, 4};
        // Padded logits [2, 4, V_pad]; the padding columns get a large logit, which would
        // dominate the softmax if it were not masked.
        Tensor all = wf::scale(Tensor::randn_at({2, 4, padded}, kInputSeed, 0, kF64), 3.0);
        double* a = all.data<double>();
        for (std::int64_t r = 0; r < 8; ++r) {
          for (std::int64_t j = vocab; j < padded; ++j) a[r * padded + j] = 40.0;
        }
        all = all.to(dtype);
        // Targets everywhere in the vocabulary (the last id among them), two rows ignored.
        std::vector<std::int64_t> t = {vocab - 1, -100, 0, (vocab * 2) / 3, 5 % vocab, -100, vocab / 2, 1};
        const Tensor targets = Tensor::from_vector(t, lead);

        Tensor whole = part(all, -1, 0, vocab), shard = part(all, -1, me * k, k);
        whole.set_requires_grad();
        shard.set_requires_grad();
        const Tensor expected = sum ? wf::cross_entropy_sum(whole, targets) : wf::cross_entropy(whole, targets);
        const Tensor loss = wf::parallel::vocab_parallel_cross_entropy(shard, targets, *group, vocab, -100, reduction);
        CHECK(loss.dtype() == dtype);
        CHECK(mismatch(loss, expected, tolerance) == "");

        // An upstream gradient other than 1 scales every logit's.
        wf::scale(expected, 0.75).backward();
        wf::scale(loss, 0.75).backward();
        REQUIRE(shard.grad().defined());
        const std::int64_t real = real_count(vocab, me * k, k);
        if (real > 0) CHECK(mismatch(part(shard.grad(), -1, 0, real), part(whole.grad(), -1, me * k, real), tolerance) == "");
        if (real < k) CHECK(mismatch(part(shard.grad(), -1, real, k - real), Tensor::zeros({2, 4, k - real}, dtype)) == "");
      }
    }
  }
}

TEST_CASE("tp vocab_parallel_cross_entropy of an all-ignored batch is 0 with 0 gradients", "[dist][tp]") {
  auto group = world_group("t.tp.vocab.ignored");
  const int P = group->size();
  const std::int64_t vocab = 13, k = wf::parallel::padded_vocab_size(vocab, P) / P;
  const Tensor targets = Tensor::full({3, 2}, -100.0, DType::i64);
  for (const LossReduction reduction : {LossReduction::mean, LossReduction::sum}) {
    Tensor shard = Tensor::randn_at({3, 2, k}, kInputSeed, 0, kF64);
    shard.set_requires_grad();
    const Tensor loss = wf::parallel::vocab_parallel_cross_entropy(shard, targets, *group, vocab, -100, reduction);
    CHECK(loss.item() == 0.0);
    loss.backward();
    CHECK(mismatch(shard.grad(), Tensor::zeros({3, 2, k}, kF64)) == "");
  }
}

TEST_CASE("tp vocab_parallel_cross_entropy refuses bad shapes and targets on every rank", "[dist][tp]") {
  auto group = world_group("t.tp.vocab.checks");
  const int P = group->size();
  const std::int64_t vocab = 13, k = wf::parallel::padded_vocab_size(vocab, P) / P;
  const Tensor shard = Tensor::randn_at({2, k}, kInputSeed, 0, kF64);
  CHECK_THROWS_WITH(wf::parallel::vocab_parallel_cross_entropy(shard, Tensor::from_vector(std::vector<std::int64_t>{1, 13}, {2}),
                                                               *group, vocab),
                    Catch::Contains("target 13 of row 1 is outside the vocabulary [0, 13)"));
  CHECK_THROWS_WITH(wf::parallel::vocab_parallel_cross_entropy(Tensor::randn_at({2, k + 1}, kInputSeed, 0, kF64),
                                                               Tensor::zeros({2}, DType::i64), *group, vocab),
                    Catch::Contains(fmt::format("must end in {} columns", k)));
}
