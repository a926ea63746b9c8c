// Packed documents through the decoders (GPT with learned positions, LLaMA with RoPE): with the
// same weights, a batch whose rows pack several documents (longer and shorter ones, a one-token
// one, each row its own) gives every token the logits, and every document the loss, of that
// document run alone as its own sequence from position 0; the parameter gradients of the packed
// loss sum are the sum of the documents' own. In f64, where only summation order differs: within
// 1e-10 (absolute on logits and losses of order 1, relative to each gradient's largest entry).
// Also with the attention-output checkpoint (its replay sees the documents too), and a row of one
// document is the unpacked model. Layouts across processes: tests/dist/test_train_parity*.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "models/model_testing.h"
#include "nn/module_testing.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/models/gpt.h"
#include "wallfacer/models/llama.h"
#include "wallfacer/ops/ops.h"

using wf::DType;
using wf::Tensor;
using wf::models::DecoderLM;
using wf::models::token_batch;
using wf::models::testing::grads_by_name;
using wf::models::testing::positions_of;
using wf::models::testing::random_ids;
using wf::nn::testing::max_abs_diff;

namespace {

using Lengths = std::vector<std::int64_t>;
constexpr std::int64_t kTokens = 16, kVocab = 40;
constexpr double kTolerance = 1e-10;
constexpr std::int64_t kIgnore = -100;  // cross_entropy's ignore_index

// Each row's documents, one after another: short and long ones, a one-token one, and a row of
// other lengths than the first.
const std::vector<Lengths> kRows = {{5, 1, 7, 3}, {9, 2, 4, 1}};

wf::DocumentBounds bounds_of(const std::vector<Lengths>& rows) {
  wf::DocumentBounds bounds;
  for (const Lengths& row : rows) {
    bounds.push_back({0});
    for (const std::int64_t length : row) bounds.back().push_back(bounds.back().back() + length);
  }
  return bounds;
}

// [rows, tokens] i64: each token's position inside its document.
Tensor positions_in_documents(const wf::DocumentBounds& bounds) {
  std::vector<std::int64_t> positions;
  for (const auto& row : bounds) {
    for (std::size_t d = 0; d + 1 < row.size(); ++d) {
      for (std::int64_t p = row[d]; p < row[d + 1]; ++p) positions.push_back(p - row[d]);
    }
  }
  return Tensor::from_vector(positions, {static_cast<std::int64_t>(bounds.size()), kTokens});
}

// Columns [begin, end) of row `row` of an i64 [rows, tokens] tensor, as [1, end − begin].
Tensor columns(const Tensor& t, std::int64_t row, std::int64_t begin, std::int64_t end) {
  return wf::narrow(t.slice0(row, row + 1), 1, begin, end - begin);
}

// `targets` with every position outside [begin, end) of `row` ignored.
Tensor only(const Tensor& targets, std::int64_t row, std::int64_t begin, std::int64_t end) {
  Tensor out = targets.clone();
  std::int64_t* t = out.data<std::int64_t>();
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    const std::int64_t r = i / kTokens, c = i % kTokens;
    if (r != row || c < begin || c >= end) t[i] = kIgnore;
  }
  return out;
}

double largest_entry(const Tensor& t) {
  double m = 0;
  for (const double x : t.to_vector<double>()) m = std::max(m, std::abs(x));
  return m;
}

void check_packed_equals_documents_alone(DecoderLM& model) {
  model.to(DType::f64);
  const wf::DocumentBounds bounds = bounds_of(kRows);
  const Tensor ids = random_ids(2, kTokens, kVocab, 21), targets = random_ids(2, kTokens, kVocab, 22);
  const Tensor positions = positions_in_documents(bounds);

  // Every token's logits and every document's loss, packed against alone.
  const Tensor packed_logits = model.forward(ids, wf::nn::TokenPositions{positions, bounds});
  model.zero_grad();
  for (std::int64_t row = 0; row < 2; ++row) {
    const auto& b = bounds[static_cast<std::size_t>(row)];
    for (std::size_t d = 0; d + 1 < b.size(); ++d) {
      INFO("row " << row << ", document [" << b[d] << ", " << b[d + 1] << ")");
      const Tensor doc_ids = columns(ids, row, b[d], b[d + 1]), doc_targets = columns(targets, row, b[d], b[d + 1]);
      const Tensor alone = model.forward(doc_ids);
      CHECK(max_abs_diff(wf::narrow(packed_logits.slice0(row, row + 1), 1, b[d], b[d + 1] - b[d]), alone) <=
            kTolerance);
      const double packed_loss =
          model.loss_sum(token_batch(ids, only(targets, row, b[d], b[d + 1]), positions, bounds)).sum.item();
      // The document alone, its gradients accumulated over the documents.
      const wf::models::LossSum alone_loss =
          model.loss_sum(token_batch(doc_ids, doc_targets, positions_of(b[d + 1] - b[d])));
      CHECK(std::abs(packed_loss - alone_loss.sum.item()) <= kTolerance);
      wf::autograd::backward({alone_loss.sum});
    }
  }
  const std::map<std::string, Tensor> alone = grads_by_name(model);

  // The packed batch's loss sum: its gradients are the documents' summed.
  model.zero_grad();
  wf::autograd::backward({model.loss_sum(token_batch(ids, targets, positions, bounds)).sum});
  for (const auto& [name, grad] : grads_by_name(model)) {
    INFO(name);
    CHECK(max_abs_diff(grad, alone.at(name)) <= kTolerance * largest_entry(alone.at(name)));
  }
}

// A row of one document is the unpacked model (the per-row path against the shared one).
void check_one_document_per_row_is_unpacked(DecoderLM& model) {
  model.to(DType::f64);
  const Tensor ids = random_ids(2, kTokens, kVocab, 23);
  std::vector<std::int64_t> per_row(2 * kTokens);
  for (std::size_t i = 0; i < per_row.size(); ++i) per_row[i] = static_cast<std::int64_t>(i) % kTokens;
  const Tensor positions = Tensor::from_vector(per_row, {2, kTokens});
  const Tensor packed = model.forward(ids, wf::nn::TokenPositions{positions, {{0, kTokens}}});
  CHECK(max_abs_diff(packed, model.forward(ids)) <= kTolerance);
}

wf::models::GptOptions tiny_gpt(bool checkpoint_attention) {
  return {.vocab_size = kVocab, .max_seq_len = kTokens, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .d_model = 16,
          .checkpoint_attention = checkpoint_attention, .init_std = 0.2, .seed = 9};
}

wf::models::LlamaOptions tiny_llama(bool checkpoint_attention) {
  return {.vocab_size = kVocab, .max_seq_len = kTokens, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .d_model = 16,
          .d_ff = 24, .rope_theta = 500.0, .checkpoint_attention = checkpoint_attention, .init_std = 0.2, .seed = 4};
}

// Both checks, with and without the attention-output checkpoint.
template <class Model, class Options>
void check_packed_documents(Options (*options_of)(bool checkpoint_attention)) {
  for (const bool checkpoint : {false, true}) {
    INFO("checkpoint at the attention output: " << checkpoint);
    Model model(options_of(checkpoint));
    check_packed_equals_documents_alone(model);
  }
  Model model(options_of(false));
  check_one_document_per_row_is_unpacked(model);
}

}  // namespace

TEST_CASE("gpt: packed documents give each document its own logits, loss and gradients (learned positions restart)",
          "[models][packed]") {
  check_packed_documents<wf::models::Gpt>(tiny_gpt);
}

TEST_CASE("llama: packed documents give each document its own logits, loss and gradients (RoPE restarts)",
          "[models][packed]") {
  check_packed_documents<wf::models::Llama>(tiny_llama);
}
