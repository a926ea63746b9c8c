// Whole tensors from parameter shards and back (sharded_state.h).
#include "wallfacer/train/sharded_state.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <map>
#include <string_view>
#include <string>
#include <utility>
#include <vector>

#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/core/error.h"
#include "wallfacer/ops/shape_ops.h"
#include "wallfacer/parallel/collectives.h"

namespace wf::train {
namespace {

// Each parameter's index in named_parameters() order, by name.
std::map<std::string, std::size_t, std::less<>> parameter_indices(const std::vector<nn::NamedShard>& shards) {
  std::map<std::string, std::size_t, std::less<>> index;
  for (std::size_t i = 0; i < shards.size(); ++i) index.emplace(shards[i].first, i);
  return index;
}

// What AdamW keeps per parameter, under "<parameter name>.<field>" in a checkpoint.
constexpr std::array<std::string_view, 3> kAdamWFields = {"step", "exp_avg", "exp_avg_sq"};

}  // namespace

Tensor gather_whole(const Tensor& local, const nn::ParameterShard& shard, comm::CommGrid& grid) {
  if (!shard.is_sharded()) return local;
  WF_CHECK(local.shape() == shard.local_shape(), "gather_whole: the tensor {} is not the shard {} ({} expected)",
           shape_str(local.shape()), nn::shard_str(shard), shape_str(shard.local_shape()));
  comm::Group& group = grid.group(shard.group);
  WF_CHECK(group.size() == shard.parts, "gather_whole: the shard {} has {} parts, but group '{}' has {} ranks",
           nn::shard_str(shard), shard.parts, shard.group, group.size());
  autograd::NoGradGuard no_grad;
  Tensor whole = parallel::gather_dim(group, local, shard.dim);
  if (shard.unpadded_length > 0) whole = narrow(whole, shard.dim, 0, shard.unpadded_length).clone();
  return whole;
}

Tensor local_slice(const Tensor& whole, const nn::ParameterShard& shard, std::string_view name) {
  WF_USER_CHECK(whole.shape() == shard.unpadded_shape(),
                "'{}' has shape {} in the checkpoint, but the model's parameter is {} (shard {}); the checkpoint was "
                "written for another model",
                name, shape_str(whole.shape()), shape_str(shard.unpadded_shape()), nn::shard_str(shard));
  if (!shard.is_sharded()) return whole;
  autograd::NoGradGuard no_grad;
  Tensor padded = whole;
  if (shard.unpadded_length > 0) {
    Shape pad = whole.shape();
    pad[static_cast<std::size_t>(shard.dim)] = shard.global_shape[static_cast<std::size_t>(shard.dim)] - shard.unpadded_length;
    padded = cat({whole, Tensor::zeros(pad, whole.dtype())}, shard.dim);
  }
  return narrow(padded, shard.dim, shard.start(), shard.length()).clone();
}

WholeState gather_whole_state(const nn::Module& model, const AdamW& optimizer, comm::CommGrid& grid) {
  const std::vector<nn::NamedShard> shards = model.named_parameter_shards();
  WF_CHECK(optimizer.num_params() == shards.size(),
           "gather_whole_state: the optimizer holds {} parameters but the model has {}; build it over "
           "model.parameters()",
           optimizer.num_params(), shards.size());
  const auto index = parameter_indices(shards);
  WholeState out;
  for (const auto& [name, tensor] : model.state_dict()) {
    const auto it = index.find(name);
    out.model.insert(name, it == index.end() ? tensor : gather_whole(tensor, shards[it->second].second, grid));
  }
  // In parameter order, the same on every rank of a tp group: the gathers are collectives.
  const nn::StateDict moments = optimizer.state_dict();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    if (!moments.contains(adamw_state_key(i, "step"))) continue;  // not updated yet (on every rank alike)
    const auto& [name, shard] = shards[i];
    for (const std::string_view field : kAdamWFields) {
      const Tensor& t = moments.at(adamw_state_key(i, field));
      out.optimizer.insert(fmt::format("{}.{}", name, field), field == "step" ? t : gather_whole(t, shard, grid));
    }
  }
  return out;
}

void load_whole_state(const WholeState& state, nn::Module& model, AdamW& optimizer) {
  const std::vector<nn::NamedShard> shards = model.named_parameter_shards();
  const auto index = parameter_indices(shards);
  nn::StateDict local_model, local_optimizer;
  for (const auto& [name, tensor] : state.model) {
    const auto it = index.find(name);
    // Unknown names go through as they are: the model's strict load lists them.
    local_model.insert(name, it == index.end() ? tensor : local_slice(tensor, shards[it->second].second, name));
  }
  // Checked by name here, so that a message names the parameter, not AdamW's position for it.
  std::vector<std::string> problems;
  std::map<std::size_t, int> fields_of;  // parameter index → how many of its fields the state has
  for (const auto& [key, tensor] : state.optimizer) {
    const auto dot = key.rfind('.');
    const auto it = dot == std::string::npos ? index.end() : index.find(std::string_view(key).substr(0, dot));
    const std::string field = dot == std::string::npos ? std::string() : key.substr(dot + 1);
    if (it == index.end()) {
      problems.push_back(fmt::format("'{}' names no parameter of the model", key));
    } else if (std::find(kAdamWFields.begin(), kAdamWFields.end(), field) == kAdamWFields.end()) {
      problems.push_back(fmt::format("'{}' is not an AdamW field ({})", key, fmt::join(kAdamWFields, ", ")));
    } else {
      ++fields_of[it->second];
      local_optimizer.insert(adamw_state_key(it->second, field),
                             field == "step" ? tensor : local_slice(tensor, shards[it->second].second, key));
    }
  }
  for (const auto& [i, count] : fields_of) {
    if (count != static_cast<int>(kAdamWFields.size())) {
      problems.push_back(fmt::format("'{}' has only {} of its {} AdamW fields ({})", shards[i].first, count,
                                     kAdamWFields.size(), fmt::join(kAdamWFields, ", ")));
    }
  }
  WF_USER_CHECK(problems.empty(),
                "the checkpoint's optimizer state does not fit the model: {}; the checkpoint was written for another "
                "model",
                fmt::join(problems, "; "));
  model.load_state_dict(local_model);
  optimizer.load_state_dict(local_optimizer);
}

}  // namespace wf::train
