#pragma once
// LLaMA: the DecoderLM as LLaMA builds it — RMSNorm, rotary positions (theta from the config),
// SwiGLU feed-forward (gate, up, down), grouped-query attention, no biases, an untied LM head and
// no residual scaling of the init. Registered as "llama" with its `model:` keys:
//
//   n_layer n_head n_kv_head (0 = n_head) d_model d_ff vocab_size max_seq_len rope_theta norm_eps
//   tie_embeddings dropout checkpoint_attention init_std
//
// Presets: configs/llama-tiny.yaml (CPU), llama-1b.yaml and llama-7b.yaml (GPU shapes).
// The worked example of docs/adding-a-model.md.
#include <cstdint>
#include <memory>

#include "wallfacer/models/decoder.h"

namespace wf::models {

struct LlamaOptions {
  std::int64_t vocab_size = 32000;
  std::int64_t max_seq_len = 2048;
  std::int64_t n_layer = 4;
  std::int64_t n_head = 8;
  std::int64_t n_kv_head = 0;  // 0 → n_head
  std::int64_t d_model = 512;
  std::int64_t d_ff = 1376;    // SwiGLU hidden width (LLaMA: about 8/3·d_model, rounded up); 0: 4·d_model
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = false;
  double dropout = 0.0;
  bool checkpoint_attention = false;
  double init_std = 0.02;
  std::uint64_t seed = 0;
};

// The decoder LLaMA is: LLaMA's fixed choices plus these options.
DecoderOptions llama_decoder_options(const LlamaOptions& options);
// The model section of a run configuration as LlamaOptions, seeded with train.seed.
LlamaOptions llama_options(const config::RunConfig& config);
const config::ModelKeys<LlamaOptions>& llama_keys();

class Llama : public DecoderLM {
 public:
  explicit Llama(const LlamaOptions& options) : DecoderLM("llama", llama_decoder_options(options)) {}
  // A stage or another variation of the same decoder.
  explicit Llama(const DecoderOptions& options) : DecoderLM("llama", options) {}
};

std::shared_ptr<Model> make_llama(const config::RunConfig& config, comm::CommGrid& grid);

}  // namespace wf::models
