// LLaMA: its options, `model:` keys and registration. The model is the DecoderLM with LLaMA's
// fixed choices (decoder.h); this file is all a decoder family needs (docs/adding-a-model.md).
#include "wallfacer/models/llama.h"

namespace wf::models {
namespace {

const ModelRegistration kRegisterLlama(decoder_schema("llama", llama_keys().keys(),
                                                      [](const config::RunConfig& c) {
                                                        return llama_decoder_options(llama_options(c));
                                                      }),
                                       make_llama);

}  // namespace

const config::ModelKeys<LlamaOptions>& llama_keys() {
  // LLaMA's choices are fixed (llama_decoder_options): only the shared keys are settable.
  static const auto keys = [] {
    config::ModelKeys<LlamaOptions> k;
    add_decoder_keys(k);
    return k;
  }();
  return keys;
}

DecoderOptions llama_decoder_options(const LlamaOptions& l) {
  DecoderOptions o;
  o.vocab_size = l.vocab_size;
  o.max_seq_len = l.max_seq_len;
  o.n_layer = l.n_layer;
  o.n_head = l.n_head;
  o.n_kv_head = l.n_kv_head;
  o.d_model = l.d_model;
  o.d_ff = l.d_ff;
  o.rope_theta = l.rope_theta;
  o.norm_eps = l.norm_eps;
  o.tie_embeddings = l.tie_embeddings;
  o.dropout = l.dropout;
  o.checkpoint_attention = l.checkpoint_attention;
  o.init_std = l.init_std;
  o.seed = l.seed;
  // What makes it LLaMA.
  o.norm = nn::NormType::rms_norm;
  o.positions = DecoderPositions::rope;
  o.feed_forward = nn::FeedForwardKind::swiglu;
  o.bias = false;
  o.scale_residual_init = false;
  return o;
}

LlamaOptions llama_options(const config::RunConfig& config) { return options_from_config(llama_keys(), config); }

std::shared_ptr<Model> make_llama(const config::RunConfig& config, comm::CommGrid& grid) {
  DecoderOptions options = llama_decoder_options(llama_options(config));
  place_on_grid(options, config, grid);
  return with_sp_attention(std::make_shared<Llama>(options), config, grid);
}

}  // namespace wf::models
