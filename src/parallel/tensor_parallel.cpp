// Column- and row-parallel linear layers and their factory (tensor_parallel.h).
#include "wallfacer/parallel/tensor_parallel.h"

#include "wallfacer/core/error.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/linalg.h"
#include "wallfacer/ops/shape_ops.h"
#include "wallfacer/parallel/vocab_parallel.h"

namespace wf::parallel {
namespace {

// Slice tp.rank() of tp.size() along `dim` of a whole `shape`, after checking (with the
// layer's name in the message) that `features` divide over the group.
nn::ParameterShard tp_slice(const char* layer, const char* what, std::int64_t features, comm::Group& tp,
                            const Shape& shape, int dim) {
  WF_CHECK(features > 0 && features % tp.size() == 0,
           "{}: {} = {} does not split into {} equal slices over group '{}'", layer, what, features, tp.size(),
           tp.name());
  return nn::ParameterShard::split(tp.name(), shape, dim, tp.size(), tp.rank());
}

void check_input(const char* layer, const Tensor& x, std::int64_t expected, const char* which) {
  WF_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == expected, "{}: input of shape {} must end in {} features ({})",
           layer, x.defined() ? shape_str(x.shape()) : std::string("(undefined)"), expected, which);
}

}  // namespace

Tensor column_parallel_input(comm::Group& tp, const Tensor& x) { return copy_to_tp(tp, x); }

Tensor row_parallel_output(comm::Group& tp, const Tensor& partial) { return reduce_from_tp(tp, partial); }

ColumnParallelLinear::ColumnParallelLinear(const nn::LinearOptions& options, comm::Group& tp, bool gather_output)
    : nn::Linear(options,
                 tp_slice("ColumnParallelLinear", "out_features", options.out_features, tp,
                          {options.out_features, options.in_features}, 0),
                 tp_slice("ColumnParallelLinear", "out_features", options.out_features, tp, {options.out_features}, 0)),
      tp_(&tp),
      gather_output_(gather_output) {}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  check_input("ColumnParallelLinear", x, options().in_features, "the whole input, replicated over the group");
  // The input is replicated and every rank uses it: its gradient is the sum of the ranks'.
  const Tensor y = linear(column_parallel_input(*tp_, x), weight(), bias());
  return gather_output_ ? gather_from_tp(*tp_, y) : y;
}

RowParallelLinear::RowParallelLinear(const nn::LinearOptions& options, comm::Group& tp, bool input_is_parallel)
    : nn::Linear(options,
                 tp_slice("RowParallelLinear", "in_features", options.in_features, tp,
                          {options.out_features, options.in_features}, 1),
                 nn::ParameterShard::replicated({options.out_features})),
      tp_(&tp),
      input_is_parallel_(input_is_parallel) {}

Tensor RowParallelLinear::forward(const Tensor& x) {
  const std::int64_t in = options().in_features;
  if (input_is_parallel_) {
    check_input("RowParallelLinear", x, in / tp_->size(), "this rank's slice of the input features");
  } else {
    check_input("RowParallelLinear", x, in, "the whole input, replicated over the group");
  }
  const Tensor own = input_is_parallel_ ? x : scatter_to_tp(*tp_, x);
  // The bias joins after the sum, so it is counted once rather than once per rank.
  const Tensor y = row_parallel_output(*tp_, linear(own, weight()));
  return bias().defined() ? add(y, bias()) : y;
}

std::shared_ptr<nn::Linear> TensorParallelLayers::linear(const nn::LinearOptions& options,
                                                         nn::LinearRole role) const {
  switch (role) {
    case nn::LinearRole::column: return std::make_shared<ColumnParallelLinear>(options, *tp_, false);
    case nn::LinearRole::row: return std::make_shared<RowParallelLinear>(options, *tp_, true);
    case nn::LinearRole::vocabulary: return std::make_shared<VocabParallelLinear>(options, *tp_);
    case nn::LinearRole::replicated: break;
  }
  return std::make_shared<nn::Linear>(options);
}

std::shared_ptr<nn::Embedding> TensorParallelLayers::embedding(const nn::EmbeddingOptions& options,
                                                               nn::EmbeddingRole role) const {
  if (role == nn::EmbeddingRole::vocabulary) return std::make_shared<VocabParallelEmbedding>(options, *tp_);
  return std::make_shared<nn::Embedding>(options);
}

Tensor TensorParallelLayers::vocabulary_loss_sum(const Tensor& logits, const Tensor& targets,
                                                 std::int64_t vocab_size) const {
  return vocab_parallel_cross_entropy(logits, targets, *tp_, vocab_size, /*ignore_index=*/-100, LossReduction::sum);
}

Tensor TensorParallelLayers::vocabulary_logits(const Tensor& logits, std::int64_t vocab_size) const {
  const Tensor whole = gather_from_tp(*tp_, logits);  // [..., V_pad]
  return whole.size(-1) == vocab_size ? whole : narrow(whole, whole.dim() - 1, 0, vocab_size);
}

}  // namespace wf::parallel
