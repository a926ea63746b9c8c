// Our decoders (GPT and LLaMA) against plain PyTorch (Debian's python3-torch 1.13,
// tests/reference/gpt_reference.py): the same weights and batch, exported with save_safetensors,
// give the same logits, mean loss (ignored targets included) and gradient of every parameter. The
// reference runs in f64, so what is measured is our f32 error:
// max |ours − torch| ≤ 1e-5 · max |torch| per tensor (plus 1e-9 absolute, for all-zero gradients
// such as unused position rows). Hidden ("[.torch]"): CTest's models_torch_reference runs it where
// /usr/bin/python3 imports torch and reports SKIPPED elsewhere (tests/CMakeLists.txt).
#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/model_testing.h"
#include "models/reference_testing.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/models/gpt.h"
#include "wallfacer/models/llama.h"
#include "wallfacer/ops/ops.h"
#include "wallfacer/train/safetensors.h"

namespace fs = std::filesystem;
using wf::DType;
using wf::Tensor;
using wf::models::DecoderLM;
using wf::models::DecoderOptions;
using wf::models::GptOptions;

using wf::models::testing::random_ids;
using namespace wf::models::testing;

namespace {

struct Case {
  std::string label;
  std::string model;  // "gpt" or "llama"
  DecoderOptions options;
  bool ignore_some_targets = false;  // targets of -100 (ignore_index) in the batch
};

std::vector<Case> cases() {
  GptOptions base{.vocab_size = 48, .max_seq_len = 24, .n_layer = 2, .n_head = 4, .d_model = 32};
  // Larger weights than GPT-2's 0.02, so softmax, GELU and the norms work away from their linear range.
  base.init_std = 0.25;
  GptOptions learned = base;
  learned.seed = 11;
  GptOptions rope = base;
  rope.positions = wf::models::GptPositions::rope;
  rope.norm = wf::nn::NormType::rms_norm;
  rope.n_kv_head = 2;
  rope.tie_embeddings = false;
  rope.seed = 12;
  wf::models::LlamaOptions llama{.vocab_size = 48, .max_seq_len = 24, .n_layer = 2, .n_head = 4, .n_kv_head = 2,
                                  .d_model = 32, .d_ff = 40, .rope_theta = 500.0};
  llama.init_std = 0.25;
  llama.seed = 13;
  return {{"gpt: learned positions + LayerNorm + MHA + tied head", "gpt", learned, false},
          {"gpt: RoPE + RMSNorm + GQA (4 q / 2 kv heads) + untied head, ignored targets", "gpt", rope, true},
          {"llama: RMSNorm + RoPE theta 500 + SwiGLU + GQA + no biases + untied head, ignored targets", "llama",
           wf::models::llama_decoder_options(llama), true}};
}

std::map<std::string, std::string> metadata(const DecoderOptions& o) {
  return {{"vocab_size", std::to_string(o.vocab_size)},
          {"max_seq_len", std::to_string(o.max_seq_len)},
          {"n_layer", std::to_string(o.n_layer)},
          {"n_head", std::to_string(o.n_head)},
          {"n_kv_head", std::to_string(o.n_kv_head)},
          {"d_model", std::to_string(o.d_model)},
          {"d_ff", std::to_string(o.d_ff)},
          {"norm", wf::nn::norm_type_name(o.norm)},
          {"positions", o.positions == wf::models::GptPositions::rope ? "rope" : "learned"},
          {"rope_theta", std::to_string(o.rope_theta)},
          {"tie_embeddings", o.tie_embeddings ? "true" : "false"},
          {"bias", o.bias ? "true" : "false"},
          {"feed_forward", wf::nn::feed_forward_name(o.feed_forward)},
          {"norm_eps", fmt::format("{}", o.norm_eps)}};
}


// One model and batch: everything the test needs to write the input file and compare the output.
struct Run {
  Case c;
  std::unique_ptr<DecoderLM> model;
  Tensor logits, loss;
  std::string in, out;
};

Run run_ours(const Case& c, const fs::path& dir, int index) {
  Run r{c, std::make_unique<DecoderLM>(c.model, c.options), {}, {},
        (dir / fmt::format("in{}.safetensors", index)).string(), (dir / fmt::format("out{}.safetensors", index)).string()};
  DecoderLM& model = *r.model;
  // Norm weights start at 1 and biases at 0: perturb every 1-D parameter so each one matters.
  std::uint64_t salt = 0;
  for (auto& [name, p] : model.named_parameters()) {
    if (p.dim() != 1) continue;
    const Tensor noise = Tensor::randn_at(p.shape(), c.options.seed + 1000, salt);
    salt += static_cast<std::uint64_t>(p.numel());
    float* w = p.data<float>();
    const float* n = noise.data<float>();
    for (std::int64_t i = 0; i < p.numel(); ++i) w[i] += 0.2f * n[i];
  }

  const std::int64_t batch = 3, tokens = 16, offset = 5;  // positions 5..20: not 0-based on purpose
  const Tensor inputs = random_ids(batch, tokens, c.options.vocab_size, c.options.seed * 2);
  Tensor targets = random_ids(batch, tokens, c.options.vocab_size, c.options.seed * 2 + 1);
  if (c.ignore_some_targets) {  // every fifth target is padding: the mean is over the others
    std::int64_t* t = targets.data<std::int64_t>();
    for (std::int64_t i = 0; i < targets.numel(); i += 5) t[i] = -100;
  }
  const Tensor positions =
      Tensor::arange(double(offset), double(offset + tokens), 1.0, DType::i64);

  wf::nn::StateDict file = model.state_dict();
  file.insert("inputs", inputs);
  file.insert("targets", targets);
  file.insert("positions", positions);
  wf::train::save_safetensors(r.in, file, metadata(model.options()));

  model.zero_grad();
  r.logits = model.forward(inputs, positions);
  const wf::models::LossSum sum = model.loss_sum(wf::models::token_batch(inputs, targets, positions));
  CHECK(sum.count.item() == wf::count_targets(targets));
  r.loss = wf::scale(sum.sum, 1.0 / sum.count.item());
  wf::autograd::backward({r.loss});
  return r;
}

}  // namespace

TEST_CASE("decoders: GPT and LLaMA logits, loss and gradients match PyTorch (tests/reference/gpt_reference.py)",
          "[models][reference][.torch]") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("wf_gpt_reference_{}", ::getpid());
  fs::create_directories(dir);
  std::vector<Run> runs;
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& c : cases()) {
    runs.push_back(run_ours(c, dir, static_cast<int>(runs.size())));
    files.emplace_back(runs.back().in, runs.back().out);
  }
  run_reference_script("gpt_reference.py", files);
  for (const auto& r : runs) {
    check_against_reference(r.c.label, r.out, {{"logits", r.logits}, {"loss", r.loss}}, *r.model, r.loss.item());
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
}
