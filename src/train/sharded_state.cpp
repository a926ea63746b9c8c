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
#include "wallfacer/train/distributed_checkpoint.h"

namespace wf::train {
namespace {

// Each parameter's index in named_parameters() order, by name.
std::map<std::string, std::size_t, std::less<>> parameter_indices(const std::vector<nn::NamedShard>& shards) {
  std::map<std::string, std::size_t, std::less<>> index;
  for (std::size_t i = 0; i < shards.size(); ++i) index.emplace(shards[i].first, i);
  return index;
}


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
    for (const std::string_view field : kAdamWStateFields) {
      if (!moments.contains(adamw_state_key(i, field))) continue;  // an optional field (ema) not kept
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
  std::map<std::size_t, int> fields_of;  // parameter index → how many of its required fields the state has
  for (const auto& [key, tensor] : state.optimizer) {
    const auto dot = key.rfind('.');
    const auto it = dot == std::string::npos ? index.end() : index.find(std::string_view(key).substr(0, dot));
    const std::string field = dot == std::string::npos ? std::string() : key.substr(dot + 1);
    if (it == index.end()) {
      problems.push_back(fmt::format("'{}' names no parameter of the model", key));
    } else if (std::find(kAdamWStateFields.begin(), kAdamWStateFields.end(), field) == kAdamWStateFields.end()) {
      problems.push_back(fmt::format("'{}' is not an AdamW field ({})", key, fmt::join(kAdamWStateFields, ", ")));
    } else {
      fields_of[it->second] += adamw_field_required(field) ? 1 : 0;
      local_optimizer.insert(adamw_state_key(it->second, field),
                             field == "step" ? tensor : local_slice(tensor, shards[it->second].second, key));
    }
  }
  for (const auto& [i, count] : fields_of) {
    const std::vector<std::string_view> required = adamw_required_fields();
    if (count != static_cast<int>(required.size())) {
      problems.push_back(fmt::format("'{}' has only {} of its {} AdamW fields ({})", shards[i].first, count,
                                     required.size(), fmt::join(required, ", ")));
    }
  }
  WF_USER_CHECK(problems.empty(),
                "the checkpoint's optimizer state does not fit the model: {}; the checkpoint was written for another "
                "model",
                fmt::join(problems, "; "));
  model.load_state_dict(local_model);
  optimizer.load_state_dict(local_optimizer);
}

namespace {

// The model's pieces: each state_dict() tensor (parameters and buffers) as this rank's slice.
ShardedStateDict model_pieces(const nn::Module& model, int replica_rank, int tp_rank) {
  const std::vector<nn::NamedShard> shards = model.named_parameter_shards();
  const auto index = parameter_indices(shards);
  ShardedStateDict pieces;
  for (const auto& [name, tensor] : model.state_dict()) {
    const auto it = index.find(name);
    const nn::ParameterShard shard =
        it == index.end() ? nn::ParameterShard::replicated(tensor.shape()) : shards[it->second].second;
    pieces.push_back({name, shard, 0, tensor.numel(),
                      replica_rank == 0 && (shard.is_sharded() || tp_rank == 0), tensor});
  }
  return pieces;
}

void check_slots(const AdamW& optimizer, const std::vector<OptimizerSlot>& slots) {
  WF_CHECK(optimizer.num_params() == slots.size(), "distributed checkpoint: the optimizer holds {} parameters but {} "
           "slots describe them; slots[i] is AdamW parameter i", optimizer.num_params(), slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    WF_CHECK(optimizer.params()[i].numel() == slots[i].flat_end - slots[i].flat_begin,
             "distributed checkpoint: AdamW parameter {} has {} elements but its slot '{}' [{}, {}) has {}", i,
             optimizer.params()[i].numel(), slots[i].name, slots[i].flat_begin, slots[i].flat_end,
             slots[i].flat_end - slots[i].flat_begin);
  }
}

// The pieces of slot `slot`'s optimizer fields, their data `step`, the moments and the EMA (an
// undefined ema: none kept).
void add_slot_pieces(ShardedStateDict& pieces, const OptimizerSlot& slot, const Tensor& step, const Tensor& exp_avg,
                     const Tensor& exp_avg_sq, const Tensor& ema) {
  // One writer of the step count over all slots and tp slices of the parameter.
  const bool step_writer = slot.writer && slot.flat_begin == 0 && slot.shard.index == 0;
  pieces.push_back({slot.name + ".step", nn::ParameterShard::replicated({}), 0, 1, step_writer, step});
  pieces.push_back({slot.name + ".exp_avg", slot.shard, slot.flat_begin, slot.flat_end, slot.writer, exp_avg});
  pieces.push_back({slot.name + ".exp_avg_sq", slot.shard, slot.flat_begin, slot.flat_end, slot.writer, exp_avg_sq});
  if (ema.defined()) pieces.push_back({slot.name + ".ema", slot.shard, slot.flat_begin, slot.flat_end, slot.writer, ema});
}

}  // namespace

std::vector<OptimizerSlot> whole_parameter_slots(const nn::Module& model, int replica_rank, int tp_rank) {
  std::vector<OptimizerSlot> slots;
  for (const auto& [name, shard] : model.named_parameter_shards()) {
    slots.push_back({name, shard, 0, shape_numel(shard.local_shape()),
                     replica_rank == 0 && (shard.is_sharded() || tp_rank == 0)});
  }
  return slots;
}

ShardedStateDict sharded_state_dict(nn::Module& model, AdamW& optimizer, const std::vector<OptimizerSlot>& slots,
                                    int replica_rank, int tp_rank) {
  check_slots(optimizer, slots);
  ShardedStateDict pieces = model_pieces(model, replica_rank, tp_rank);
  const nn::StateDict moments = optimizer.state_dict();
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (!moments.contains(adamw_state_key(i, "step"))) continue;  // not updated yet (on every rank alike)
    const std::string ema = adamw_state_key(i, "ema");
    add_slot_pieces(pieces, slots[i], moments.at(adamw_state_key(i, "step")), moments.at(adamw_state_key(i, "exp_avg")),
                    moments.at(adamw_state_key(i, "exp_avg_sq")), moments.contains(ema) ? moments.at(ema) : Tensor());
  }
  return pieces;
}

void load_sharded_state(CheckpointReader& reader, nn::Module& model, AdamW& optimizer,
                        const std::vector<OptimizerSlot>& slots, int replica_rank, int tp_rank, bool whole_model) {
  check_slots(optimizer, slots);
  ShardedStateDict targets = model_pieces(model, replica_rank, tp_rank);
  // A model tensor of the checkpoint that this model lacks means another model, as much as one
  // missing (which load() reports).
  std::vector<std::string> extra;
  for (const CheckpointReader::TensorInfo& info : reader.tensors()) {
    const bool known = std::any_of(targets.begin(), targets.end(), [&](const ShardedTensor& t) { return t.key == info.key; });
    if (whole_model && !is_optimizer_key(info.key) && !known) extra.push_back(info.key);
  }
  if (extra.size() > 8) extra.resize(8), extra.push_back("...");
  WF_USER_CHECK(extra.empty(), "checkpoint '{}' holds model tensors this model does not have ({}): it was written "
                "for another model", reader.dir(), fmt::join(extra, ", "));
  const std::size_t model_targets = targets.size();
  std::vector<std::size_t> with_state;  // the slots whose state the checkpoint holds
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (reader.find(slots[i].name + ".step") == nullptr) continue;
    const Tensor& param = optimizer.params()[i];
    const bool ema = reader.find(slots[i].name + ".ema") != nullptr;
    add_slot_pieces(targets, slots[i], Tensor::zeros({}, DType::i64), Tensor::zeros(param.shape(), param.dtype()),
                    Tensor::zeros(param.shape(), param.dtype()),
                    ema ? Tensor::zeros(param.shape(), param.dtype()) : Tensor());
    with_state.push_back(i);
  }
  reader.load(targets);
  nn::StateDict state;
  // The optimizer's targets follow the model's, in slot order, each slot's fields in
  // kAdamWStateFields order (those it has).
  std::size_t next = model_targets;
  for (const std::size_t i : with_state) {
    for (const std::string_view field : kAdamWStateFields) {
      if (next < targets.size() && targets[next].key == slots[i].name + "." + std::string(field)) {
        state.insert(adamw_state_key(i, field), targets[next++].data);
      }
    }
  }
  optimizer.load_state_dict(state);
}

}  // namespace wf::train
