#include "wallfacer/nn/layer_factory.h"

#include "wallfacer/ops/loss.h"

namespace wf::nn {

const char* linear_role_name(LinearRole role) {
  switch (role) {
    case LinearRole::column: return "column";
    case LinearRole::row: return "row";
    case LinearRole::replicated: return "replicated";
    case LinearRole::vocabulary: return "vocabulary";
  }
  return "unknown";
}

LayerFactory::~LayerFactory() = default;

std::shared_ptr<Linear> LayerFactory::linear(const LinearOptions& options, LinearRole /*role*/) const {
  return std::make_shared<Linear>(options);
}

std::shared_ptr<Embedding> LayerFactory::embedding(const EmbeddingOptions& options, EmbeddingRole /*role*/) const {
  return std::make_shared<Embedding>(options);
}

std::shared_ptr<Normalization> LayerFactory::norm(NormType type, std::int64_t dim, double eps,
                                                  ActivationRegion /*region*/) const {
  return make_norm(type, dim, eps);
}

std::shared_ptr<Dropout> LayerFactory::dropout(double p, ActivationRegion /*region*/) const {
  return std::make_shared<Dropout>(p);
}

Tensor LayerFactory::vocabulary_loss_sum(const Tensor& logits, const Tensor& targets,
                                         std::int64_t vocab_size) const {
  WF_CHECK(logits.defined() && logits.size(-1) == vocab_size,
           "vocabulary_loss_sum: logits {} must end in the vocabulary's {} columns",
           logits.defined() ? shape_str(logits.shape()) : "undefined", vocab_size);
  return cross_entropy_sum(logits, targets);
}

Tensor LayerFactory::head_loss_sum(const Tensor& h, const VocabularyHead& head, const Tensor& targets,
                                   std::int64_t vocab_size) const {
  WF_CHECK(head.weight.defined() && head.weight.dim() == 2 && head.weight.size(0) == vocab_size,
           "head_loss_sum: the head's weight {} must be [vocab_size = {}, d]",
           head.weight.defined() ? shape_str(head.weight.shape()) : "undefined", vocab_size);
  return linear_cross_entropy_sum(h, head.weight, targets, /*ignore_index=*/-100, head.chunk_rows);
}

Tensor LayerFactory::vocabulary_logits(const Tensor& logits, std::int64_t /*vocab_size*/) const { return logits; }

const std::shared_ptr<const LayerFactory>& default_layer_factory() {
  static const std::shared_ptr<const LayerFactory> factory = std::make_shared<LayerFactory>();
  return factory;
}

const LayerFactory& layers_or_default(const std::shared_ptr<const LayerFactory>& factory) {
  return factory ? *factory : *default_layer_factory();
}

}  // namespace wf::nn
