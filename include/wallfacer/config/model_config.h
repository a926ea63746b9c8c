#pragma once
// The `model:` section of a run config: the registered model's name and the values given for
// its keys. Which keys exist, their types, ranges and defaults are the model's own
// (model_schema.h); this holds only what the file or --set gave, as canonical text, so any
// registered model's section is one type and a key is checked by the schema that declares it.
#include <concepts>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

namespace wf::config {

struct ModelConfig {
  std::string name = "gpt";
  // Given values by key ("n_layer"), canonical text; a key not here takes the model's default.
  std::map<std::string, std::string, std::less<>> values;

  // Sets `key` from text exactly as a YAML value or --set model.key=text would: checked
  // against the schema of `name`; wf::Error "model.key: 'text' is out of range; expected ..."
  // or naming the model's keys when it has no such key.
  void set(std::string_view key, std::string_view text);
  template <class T>
    requires std::is_arithmetic_v<T>
  void set(std::string_view key, T value) {
    if constexpr (std::is_same_v<T, bool>) {
      set(key, std::string_view(value ? "true" : "false"));
    } else {
      set(key, std::string_view(fmt::format("{}", value)));
    }
  }
  // Switches to another registered model, re-checking the given values against its keys.
  void set_name(std::string_view model_name);
  // The value of `key`: given, or the model's default. wf::Error for a key it does not have.
  std::string get(std::string_view key) const;

  // Equal when the same model has the same value for every key (given or default).
  friend bool operator==(const ModelConfig& a, const ModelConfig& b);
};

}  // namespace wf::config
