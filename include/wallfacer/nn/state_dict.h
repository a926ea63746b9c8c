#pragma once
// StateDict: tensors by name, in insertion order (a module's is registration order,
// depth-first), with lookup by name. The unit that checkpoints save and load.
#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "wallfacer/core/tensor.h"

namespace wf::nn {

class StateDict {
 public:
  using Entry = std::pair<std::string, Tensor>;
  using const_iterator = std::vector<Entry>::const_iterator;

  // Appends an entry; wf::Error when the name is already present or the tensor is undefined.
  void insert(std::string name, Tensor value);
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  const Tensor* find(std::string_view name) const;  // nullptr when absent
  const Tensor& at(std::string_view name) const;    // wf::Error naming the key when absent
  std::vector<std::string> keys() const;

  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const_iterator begin() const { return entries_.begin(); }
  const_iterator end() const { return entries_.end(); }

 private:
  std::vector<Entry> entries_;
  std::unordered_map<std::string, std::size_t> index_;
};

}  // namespace wf::nn
