// GPT's `model:` keys and its registration; the model itself is the DecoderLM (decoder.cpp).
#include "wallfacer/models/gpt.h"

namespace wf::models {
namespace {

const config::Choices<nn::NormType> kNorms = {{"layernorm", nn::NormType::layer_norm},
                                              {"rmsnorm", nn::NormType::rms_norm}};
const config::Choices<DecoderPositions> kPositions = {{"learned", DecoderPositions::learned},
                                                      {"rope", DecoderPositions::rope}};

const ModelRegistration kRegisterGpt(decoder_schema("gpt", gpt_keys().keys(), gpt_options), make_gpt);

}  // namespace

const config::ModelKeys<GptOptions>& gpt_keys() {
  static const auto keys = config::ModelKeys<GptOptions>()
                               .integer("n_layer", &GptOptions::n_layer, 1)
                               .integer("n_head", &GptOptions::n_head, 1)
                               .integer("n_kv_head", &GptOptions::n_kv_head, 0)  // 0: n_head
                               .integer("d_model", &GptOptions::d_model, 1)
                               .integer("d_ff", &GptOptions::d_ff, 0)  // 0: 4·d_model
                               .integer("vocab_size", &GptOptions::vocab_size, 1)
                               .integer("max_seq_len", &GptOptions::max_seq_len, 1)
                               .choice("norm", &GptOptions::norm, kNorms)
                               .number("norm_eps", &GptOptions::norm_eps, 0.0, false)
                               .choice("positions", &GptOptions::positions, kPositions)
                               .number("rope_theta", &GptOptions::rope_theta, 0.0, false)
                               .boolean("tie_embeddings", &GptOptions::tie_embeddings)
                               .number("dropout", &GptOptions::dropout, 0.0, true, 1.0, false)
                               .boolean("bias", &GptOptions::bias)
                               .boolean("checkpoint_attention", &GptOptions::checkpoint_attention_output)
                               .number("init_std", &GptOptions::init_std, 0.0, false);
  return keys;
}

GptOptions gpt_options(const config::RunConfig& config) {
  GptOptions o = gpt_keys().read(config.model);
  o.seed = static_cast<std::uint64_t>(config.train.seed);
  return o;
}

std::shared_ptr<Model> make_gpt(const config::RunConfig& config, comm::CommGrid& grid) {
  return with_sp_attention(std::make_shared<Gpt>(gpt_options(config)), config, grid);
}

}  // namespace wf::models
