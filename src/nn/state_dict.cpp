#include "wallfacer/nn/state_dict.h"

namespace wf::nn {

void StateDict::insert(std::string name, Tensor value) {
  WF_CHECK(value.defined(), "StateDict: entry '{}' is an undefined tensor", name);
  WF_CHECK(!index_.contains(name), "StateDict: duplicate key '{}'", name);
  index_.emplace(name, entries_.size());
  entries_.emplace_back(std::move(name), std::move(value));
}

const Tensor* StateDict::find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const Tensor& StateDict::at(std::string_view name) const {
  const Tensor* t = find(name);
  WF_CHECK(t != nullptr, "StateDict: no entry named '{}' (it holds {} entries)", name, entries_.size());
  return *t;
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, tensor] : entries_) names.push_back(name);
  return names;
}

}  // namespace wf::nn
