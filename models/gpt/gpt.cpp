// GPT's `model:` keys and its registration; the model itself is the DecoderLM (decoder.cpp).
#include "wallfacer/models/gpt.h"

namespace wf::models {
namespace {

const ModelRegistration kRegisterGpt(decoder_schema("gpt", gpt_keys().keys(), gpt_options), make_gpt);

}  // namespace

const config::ModelKeys<GptOptions>& gpt_keys() {
  // The choices live here, not at namespace scope: registration runs from static initialisers,
  // and a namespace-scope vector of another file's initialiser may not be built yet.
  static const auto keys = [] {
    const config::Choices<nn::NormType> kNorms = {{"layernorm", nn::NormType::layer_norm},
                                                  {"rmsnorm", nn::NormType::rms_norm}};
    const config::Choices<DecoderPositions> kPositions = {{"learned", DecoderPositions::learned},
                                                          {"rope", DecoderPositions::rope}};
    config::ModelKeys<GptOptions> k;
    add_decoder_keys(k)
        .choice("norm", &GptOptions::norm, kNorms)
        .choice("positions", &GptOptions::positions, kPositions)
        .boolean("bias", &GptOptions::bias);
    return k;
  }();
  return keys;
}

GptOptions gpt_options(const config::RunConfig& config) { return options_from_config(gpt_keys(), config); }

std::shared_ptr<Model> make_gpt(const config::RunConfig& config, comm::CommGrid& grid) {
  GptOptions options = gpt_options(config);
  place_on_grid(options, config, grid);
  return with_sp_attention(std::make_shared<Gpt>(options), config, grid);
}

}  // namespace wf::models
