#pragma once
// The small GPT run the distributed training tests share: 2 layers, d_model 32, 4 heads with 2
// K/V heads, the byte vocabulary, 48-token sequences (a multiple of every zigzag layout's unit
// for P in {2, 3, 4, 8}) of synthetic tokens, one sequence per microbatch, lr 3e-3. Each test
// sets its layout, steps, batch, schedule and seed on top.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/core/address_sanitizer.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/data/document_index.h"
#include "wallfacer/data/token_file.h"
#include "wallfacer/models/model.h"
#include "wallfacer/train/sharded_state.h"
#include "wallfacer/train/trainer.h"

namespace wf::test {

// The optimizer steps a parity case trains: `release_steps` in an ordinary build, at most 2 under
// the sanitizers. Their pass looks for memory and UB errors, which the first two steps reach (a
// step, the update, a step on the updated weights and optimizer state); the numbers of the later
// steps are checked in Release at every world size, and under the sanitizers each step costs ten
// times as much (the parity cases were 300 of the 4-rank sanitizer run's 440 s).
inline int parity_steps(int release_steps) {
  return detail::kAddressSanitizerBuild ? std::min(release_steps, 2) : release_steps;
}

// `dir_name` names the checkpoint and log directory under the system's temporary directory.
// `model`: "gpt" or "llama" (the same sizes; LLaMA's SwiGLU, RMSNorm, RoPE and untied head).
inline config::RunConfig small_gpt_run(int dp, int sp, bool checkpoint_attention, const std::string& dir_name,
                                       const std::string& model = "gpt") {
  config::RunConfig c;
  c.model.set_name(model);
  c.model.set("n_layer", 2);
  c.model.set("n_head", 4);
  c.model.set("n_kv_head", 2);
  c.model.set("d_model", 32);
  c.model.set("d_ff", 64);
  c.model.set("vocab_size", 256);  // the byte tokenizer's (validate checks it)
  c.model.set("max_seq_len", 48);
  c.model.set("checkpoint_attention", checkpoint_attention);
  c.parallel.dp = dp;
  c.parallel.sp = sp;
  c.train.seq_len = 48;
  c.train.micro_batch_size = 1;
  c.train.lr = 3e-3;
  c.data.source = config::DataSource::synthetic;
  c.checkpoint.dir = (std::filesystem::temp_directory_path() / dir_name).string();
  c.log.dir = c.checkpoint.dir;
  return c;
}

// Packs documents (data.pack) from a token file of documents written for this process under the
// temporary directory (`name` tells the processes' files apart): the documents' lengths cycle
// through 1, 7, 20, seq_len, 3, 2·seq_len + 5, 12, 1 tokens (one-token ones, and ones shorter
// than, as long as and longer than a sequence or an sp rank's chunk), the tokens seeded in
// [0, vocab), enough for every step of `c` and its validation.
inline void pack_documents(config::RunConfig& c, const std::string& name, std::int64_t vocab) {
  const std::int64_t N = c.train.seq_len;
  const std::int64_t count = N * (c.train.global_batch_size * c.train.steps + 4) + 1;
  const std::int64_t cycle[] = {1, 7, 20, N, 3, 2 * N + 5, 12, 1};
  data::DocumentIndex index{.token_count = count, .starts = {}, .end_of_text = std::nullopt};
  for (std::int64_t start = 0, d = 0; start < count; start += cycle[d++ % 8]) index.starts.push_back(start);
  std::vector<std::uint32_t> tokens(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::uint32_t>(uniform_at(0x9ac7ed, i) * static_cast<double>(vocab));
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("wf-packed-" + name);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "train.bin").string();
  data::write_token_file(path, tokens, vocab);
  data::write_document_index(data::document_index_path(path), index);
  c.data.source = config::DataSource::file;
  c.data.train_path = path;
  c.data.val_path.clear();
  c.data.pack = true;
}

// A trainer of `config` over `grid` whose model is in `dtype` (f64 for tight parity bounds), on
// the tokens the Trainer would draw itself.
inline std::unique_ptr<train::Trainer> trainer_in(const config::RunConfig& config, comm::CommGrid& grid, DType dtype) {
  auto model = models::create(config, grid);
  model->to(dtype);
  return std::make_unique<train::Trainer>(config, grid, std::move(model), train::open_token_source(config, false),
                                          nullptr);
}


// The largest |entry| of t.
inline double largest_entry(const Tensor& t) {
  double m = 0;
  for (double x : t.to_vector<double>()) m = std::max(m, std::abs(x));
  return m;
}

// Every parameter of `part` (this rank's tp shards of its pipeline stage, or of the whole model)
// against the tensor of the same name in `reference` (one process, whole tensors): the largest
// difference relative to that tensor's largest entry must be within `tolerance`. `grads`:
// compare gradients instead of values.
inline void check_parameters_match(models::Model& reference, models::Model& part, bool grads, double tolerance) {
  const auto ref = reference.named_parameters();
  const auto shards = part.named_parameter_shards();
  const auto mine = part.named_parameters();
  REQUIRE(!mine.empty());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const std::string& name = mine[i].first;
    INFO(name << " (" << nn::shard_str(shards[i].second) << ")" << (grads ? " gradient" : " weight"));
    const auto it = std::find_if(ref.begin(), ref.end(), [&](const auto& r) { return r.first == name; });
    REQUIRE(it != ref.end());
    const Tensor whole = grads ? it->second.grad() : it->second.detach();
    const Tensor local = grads ? mine[i].second.grad() : mine[i].second.detach();
    REQUIRE(local.defined());
    const auto a = train::local_slice(whole, shards[i].second, name).to_vector<double>();
    const auto b = local.to_vector<double>();
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (std::size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::abs(a[k] - b[k]));
    CHECK(worst <= tolerance * largest_entry(whole) + 1e-300);
  }
}

}  // namespace wf::test
