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
  static const auto keys = config::ModelKeys<LlamaOptions>()
                               .integer("n_layer", &LlamaOptions::n_layer, 1)
                               .integer("n_head", &LlamaOptions::n_head, 1)
                               .integer("n_kv_head", &LlamaOptions::n_kv_head, 0)  // 0: n_head
                               .integer("d_model", &LlamaOptions::d_model, 1)
                               .integer("d_ff", &LlamaOptions::d_ff, 1)
                               .integer("vocab_size", &LlamaOptions::vocab_size, 1)
                               .integer("max_seq_len", &LlamaOptions::max_seq_len, 1)
                               .number("rope_theta", &LlamaOptions::rope_theta, 0.0, false)
                               .number("norm_eps", &LlamaOptions::norm_eps, 0.0, false)
                               .boolean("tie_embeddings", &LlamaOptions::tie_embeddings)
                               .number("dropout", &LlamaOptions::dropout, 0.0, true, 1.0, false)
                               .boolean("checkpoint_attention", &LlamaOptions::checkpoint_attention_output)
                               .number("init_std", &LlamaOptions::init_std, 0.0, false);
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
  o.checkpoint_attention_output = l.checkpoint_attention_output;
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

LlamaOptions llama_options(const config::RunConfig& config) {
  LlamaOptions o = llama_keys().read(config.model);
  o.seed = static_cast<std::uint64_t>(config.train.seed);
  return o;
}

std::shared_ptr<Model> make_llama(const config::RunConfig& config, comm::CommGrid& grid) {
  return with_sp_attention(std::make_shared<Llama>(llama_options(config)), config, grid);
}

}  // namespace wf::models
