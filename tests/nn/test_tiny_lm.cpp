// TinyLM end to end: shapes, weight tying, and learning (it overfits one small batch).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "models/tiny_lm/tiny_lm.h"
#include "nn/module_testing.h"
#include "wallfacer/train/optimizer.h"

using Catch::Contains;
using wf::DType;
using wf::Tensor;
using wf::models::TinyLM;

namespace {

Tensor byte_ids(const std::string& text, std::int64_t batch, std::int64_t tokens, std::int64_t shift) {
  std::vector<std::int64_t> ids;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < tokens; ++t) {
      ids.push_back(static_cast<unsigned char>(text[static_cast<std::size_t>(b * (tokens + 1) + t + shift)]));
    }
  }
  return Tensor::from_vector(ids, {batch, tokens});
}

}  // namespace

TEST_CASE("TinyLM: logits shape, tied head, position limits", "[nn]") {
  TinyLM model({.max_seq_len = 8, .n_layer = 1, .d_model = 8, .n_head = 2, .seed = 1});
  const Tensor ids = Tensor::from_vector<std::int64_t>({65, 66, 67, 68, 69, 70}, {2, 3});
  CHECK(model.forward(ids).shape() == wf::Shape{2, 3, 256});
  CHECK(model.forward(ids, 5).shape() == wf::Shape{2, 3, 256});
  CHECK_THROWS_WITH(model.forward(ids, 6), Contains("max_seq_len 8"));
  CHECK_FALSE(model.state_dict().contains("lm_head.weight"));

  TinyLM untied({.max_seq_len = 8, .n_layer = 1, .d_model = 8, .n_head = 2, .tie_weights = false, .seed = 1});
  CHECK(untied.state_dict().contains("lm_head.weight"));
  CHECK(untied.num_parameters() == model.num_parameters() + 256 * 8);

  // The tied embedding receives gradient from both the lookup and the head.
  const Tensor loss = model.loss(ids, ids);
  CHECK(loss.dim() == 0);
  loss.backward();
  const Tensor grad = model.token_embedding().weight().grad();
  REQUIRE(grad.defined());
  CHECK(std::abs(grad.at({0, 0})) > 0.0);  // byte 0 never occurs: only the head reaches its row
}

TEST_CASE("TinyLM overfits a single short batch", "[nn]") {
  const std::string text = "the quick brown fox jumps over the lazy dog; the dog sleeps. ";
  const std::int64_t batch = 2, tokens = 16;
  const Tensor inputs = byte_ids(text, batch, tokens, 0), targets = byte_ids(text, batch, tokens, 1);
  TinyLM model({.max_seq_len = tokens, .n_layer = 1, .d_model = 32, .n_head = 2, .seed = 3});
  wf::train::AdamW optimizer(model.parameters(), {.lr = 1e-2, .weight_decay = 0.0});
  double initial = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    const Tensor loss = model.loss(inputs, targets);
    last = loss.item();
    if (step == 0) initial = last;
    loss.backward();
    wf::train::clip_grad_norm(model.parameters(), 1.0);
    optimizer.step();
    optimizer.zero_grad();
  }
  INFO("initial " << initial << ", after 100 steps " << last);
  CHECK(initial == Approx(std::log(256.0)).epsilon(0.05));
  CHECK(last < 0.5 * initial);
}
