#pragma once
// GPT: a GPT-2 style decoder-only language model, the DecoderLM with GPT-2's choices by default
// (learned positions, LayerNorm, GELU MLP, biases, tied head, residual-scaled init); RoPE,
// RMSNorm, GQA and an untied head are options. Registered as "gpt" with its `model:` keys:
//
//   n_layer n_head n_kv_head (0 = n_head) d_model d_ff (0 = 4·d_model) vocab_size max_seq_len
//   norm (layernorm|rmsnorm) norm_eps positions (learned|rope) rope_theta tie_embeddings dropout
//   bias checkpoint_attention init_std
#include <memory>

#include "wallfacer/models/decoder.h"

namespace wf::models {

using GptOptions = DecoderOptions;
using GptPositions = DecoderPositions;

// The model section of a run configuration as GptOptions, seeded with train.seed.
GptOptions gpt_options(const config::RunConfig& config);
// GPT's keys (the registry declares them as the "gpt" schema).
const config::ModelKeys<GptOptions>& gpt_keys();

class Gpt : public DecoderLM {
 public:
  explicit Gpt(const GptOptions& options) : DecoderLM("gpt", options) {}
};

// The registry's factory for "gpt": gpt_options(config), and with sp > 1 the configured
// sequence-parallel attention strategy on the grid's sp groups.
std::shared_ptr<Model> make_gpt(const config::RunConfig& config, comm::CommGrid& grid);

}  // namespace wf::models
