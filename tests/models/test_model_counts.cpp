// Every registered model family, without a line here per family: the parameter count its schema
// states without building it (config::ModelFacts, which `validate`'s memory estimate and the
// config summary print) equals the elements of the model its factory builds, and its FLOPs per
// token, mask and vocabulary are the built model's. A family that adds a parameter to its block
// and forgets its count fails here.
#include <catch2/catch.hpp>

#include <string>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/models/model.h"

TEST_CASE("every registered model: the stated parameter count equals the built model's", "[models]") {
  wf::comm::Runtime::init();  // a world of one
  const std::vector<std::string> names = wf::models::registered_models();
  REQUIRE(names.size() >= 4);  // gpt, llama, parallel_residual, dit
  for (const std::string& name : names) {
    INFO("model " << name);
    wf::config::RunConfig config;
    config.model.set_name(name);
    const wf::config::ModelSchema& schema = wf::config::model_schema(name);
    // Small sizes wherever the family has the key (the defaults of some are 40M parameters).
    const std::pair<const char*, std::int64_t> small[] = {{"n_layer", 2},   {"d_model", 32},    {"n_head", 4},
                                                          {"d_ff", 64},     {"vocab_size", 48}, {"max_seq_len", 32},
                                                          {"image_size", 8}, {"num_classes", 3}};
    for (const auto& [key, value] : small) {
      if (schema.find(key) != nullptr) config.model.set(key, value);
    }
    config.train.seq_len = 16;
    wf::comm::CommGrid grid(wf::comm::ProcessGrid(config.parallel.grid(), 1, 0));
    const auto model = wf::models::create(config, grid);
    const wf::config::ModelFacts facts = wf::config::model_facts(config);
    CHECK(facts.parameters == static_cast<double>(model->num_parameters()));
    // The other facts the config layer states unbuilt, against what the model says of itself.
    CHECK(facts.train_flops_per_token == Approx(model->train_flops_per_token(config.train.seq_len)).epsilon(1e-12));
    CHECK(facts.causal == model->causal());
    if (model->has_logits()) {
      CHECK(facts.vocab_size == model->vocab_size());
      CHECK(facts.max_seq_len == model->max_context());
    }
  }
}
