// Reading a run config: YAML file -> RunConfig, then the --set overrides. yaml-cpp only parses;
// every value goes through the key table (schema.h) as text, so a YAML value and the same
// value given with --set are read, range-checked and reported identically.
#include <yaml-cpp/yaml.h>

#include <set>

#include "src/config/schema.h"
#include "wallfacer/config/model_schema.h"
#include "src/config/yaml_input.h"
#include "wallfacer/core/error.h"

namespace wf::config {
namespace {

using detail::Field;

// "file.yaml:12: " — yaml-cpp counts lines from 0.
std::string where(std::string_view source, const YAML::Node& node) {
  return fmt::format("{}:{}: ", source, node.Mark().line + 1);
}

std::string_view node_kind(const YAML::Node& node) {
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  return "no value";
}

// The text of a mapping key. A list or a mapping as a key is refused: yaml-cpp's Scalar() would
// read it as "" and the message would name a key nobody wrote.
std::string key_text(const YAML::Node& key, std::string_view source, std::string_view where_in) {
  WF_USER_CHECK(key.IsScalar(), "{}{}: keys must be plain names, got {}", where(source, key), where_in, node_kind(key));
  return key.Scalar();
}

void set_value(RunConfig& config, const Field& field, std::string_view text, const std::string& prefix) {
  const std::string problem = field.set(config, text);
  WF_USER_CHECK(problem.empty(), "{}{}", prefix, detail::value_message(field, text, problem));
  config.given.paths.insert(field.path());
}

// Rejects a key given twice in one mapping: yaml-cpp keeps one silently.
void check_unique(std::set<std::string>& seen, const YAML::Node& key, std::string_view path, std::string_view source) {
  WF_USER_CHECK(seen.insert(std::string(path)).second, "{}duplicate key '{}': give each key once", where(source, key),
                path);
}

void apply_section(RunConfig& config, const std::string& section, const YAML::Node& body, std::string_view source) {
  if (body.IsNull()) return;  // "train:" with nothing under it: the defaults
  WF_USER_CHECK(body.IsMap(), "{}section '{}' must be a mapping of keys (key: value), got {}", where(source, body), section,
           body.IsSequence() ? "a list" : fmt::format("the value '{}'", body.Scalar()));
  std::set<std::string> seen;
  for (const auto& entry : body) {
    const std::string key = key_text(entry.first, source, "section '" + section + "'");
    check_unique(seen, entry.first, section + "." + key, source);
    const Field* field = detail::find_field(section, key);
    WF_USER_CHECK(field != nullptr, "{}{}", where(source, entry.first), detail::unknown_key_message(section, key));
    const YAML::Node& value = entry.second;
    if (value.IsNull() && field->is_text) {
      set_value(config, *field, "", where(source, entry.first));
      continue;
    }
    if (value.IsSequence() && field->is_list) {
      std::vector<std::string> items;
      for (const auto& item : value) {
        WF_USER_CHECK(item.IsScalar(), "{}{}: expected {}, got a list holding {}", where(source, item), field->path(),
                      field->expected, node_kind(item));
        items.push_back(item.Scalar());
      }
      set_value(config, *field, fmt::format("[{}]", fmt::join(items, ", ")), where(source, value));
      continue;
    }
    WF_USER_CHECK(value.IsScalar(), "{}{}: expected {}, got {}", where(source, entry.first), field->path(), field->expected,
             node_kind(value));
    set_value(config, *field, value.Scalar(), where(source, value));
  }
}

// The model section goes through the schema of its model: `name` first (default gpt), then every
// other key is one that model declares, checked by it.
void apply_model_section(RunConfig& config, const YAML::Node& body, std::string_view source) {
  if (body.IsNull()) return;
  WF_USER_CHECK(body.IsMap(), "{}section 'model' must be a mapping of keys (key: value), got {}", where(source, body),
           body.IsSequence() ? "a list" : fmt::format("the value '{}'", body.Scalar()));
  const auto rethrow_at = [&](const YAML::Node& node, auto&& action) {
    try {
      action();
    } catch (const Error& e) {
      WF_USER_FAIL("{}{}", where(source, node), detail::without_location(e.what()));
    }
  };
  std::set<std::string> seen;
  for (const auto& entry : body) {
    const std::string key = key_text(entry.first, source, "section 'model'");
    check_unique(seen, entry.first, "model." + key, source);
    if (key != "name") continue;
    WF_USER_CHECK(entry.second.IsScalar(), "{}model.name: expected the name of a registered model, got {}",
             where(source, entry.first), node_kind(entry.second));
    rethrow_at(entry.second, [&] { config.model.set_name(entry.second.Scalar()); });
    config.given.paths.insert("model.name");
  }
  for (const auto& entry : body) {
    const std::string key = entry.first.Scalar();
    if (key == "name") continue;
    const YAML::Node& value = entry.second;
    rethrow_at(entry.first, [&] { config.model.get(key); });  // an unknown key, with did-you-mean
    config.given.paths.insert("model." + key);
    if (value.IsNull() && model_schema(config.model.name).find(key)->is_text) {
      rethrow_at(value, [&] { config.model.set(key, ""); });
      continue;
    }
    WF_USER_CHECK(value.IsScalar(), "{}model.{}: expected {}, got {}", where(source, entry.first), key,
             model_schema(config.model.name).find(key)->expected, node_kind(value));
    rethrow_at(value, [&] { config.model.set(key, value.Scalar()); });
  }
}

void apply_document(RunConfig& config, const YAML::Node& root, std::string_view source) {
  if (root.IsNull()) return;  // an empty file: every default
  WF_USER_CHECK(root.IsMap(), "{}the top level must be a mapping of sections ({}), got {}", where(source, root),
           fmt::join(detail::section_names(), ", "), root.IsSequence() ? "a list" : "a single value");
  std::set<std::string> seen;
  for (const auto& entry : root) {
    const std::string section = key_text(entry.first, source, "the top level");
    check_unique(seen, entry.first, section, source);
    WF_USER_CHECK(detail::is_section(section), "{}{}", where(source, entry.first), detail::unknown_section_message(section));
    if (section == "model") {
      apply_model_section(config, entry.second, source);
    } else {
      apply_section(config, section, entry.second, source);
    }
  }
}

}  // namespace

void apply_override(RunConfig& config, std::string_view override_text) {
  WF_USER_CHECK(detail::first_invalid_utf8(override_text) == std::string_view::npos,
                "--set: the override is not valid UTF-8 text (as a YAML config must be)");
  const std::string prefix = fmt::format("--set {}: ", override_text);
  const std::size_t equals = override_text.find('=');
  const std::string_view path = override_text.substr(0, equals);
  const std::size_t dot = path.find('.');
  WF_USER_CHECK(equals != std::string_view::npos && dot != std::string_view::npos,
                "{}expected section.key=value, e.g. --set train.lr=3e-4", prefix);
  const std::string_view section = path.substr(0, dot), key = path.substr(dot + 1);
  WF_USER_CHECK(detail::is_section(section), "{}{}", prefix, detail::unknown_section_message(section));
  if (section == "model") {
    try {
      config.model.set(key, override_text.substr(equals + 1));
    } catch (const Error& e) {
      WF_USER_FAIL("{}{}", prefix, detail::without_location(e.what()));
    }
    config.given.paths.insert(std::string(path));
    return;
  }
  const Field* field = detail::find_field(section, key);
  WF_USER_CHECK(field != nullptr, "{}{}", prefix, detail::unknown_key_message(section, key));
  set_value(config, *field, override_text.substr(equals + 1), prefix);
}

RunConfig parse_config(std::string_view yaml, const std::vector<std::string>& overrides, std::string_view source) {
  const YAML::Node root = detail::parse_yaml_document(yaml, source);
  RunConfig config;
  apply_document(config, root, source);
  for (const std::string& o : overrides) apply_override(config, o);
  return config;
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_config(detail::read_config_file(path), overrides, path);
}

std::string to_yaml(const RunConfig& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  // The model section: its name, then every key of its schema (given or default).
  out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted << config.model.name;
  for (const ModelKey& k : model_schema(config.model.name).keys) {
    out << YAML::Key << k.key << YAML::Value;
    if (k.is_text) {
      out << YAML::DoubleQuoted << config.model.get(k.key);
    } else {
      out << config.model.get(k.key);
    }
  }
  out << YAML::EndMap;
  for (const std::string& section : detail::section_names()) {
    if (section == "model") continue;
    out << YAML::Key << section << YAML::Value << YAML::BeginMap;
    for (const Field& f : detail::fields()) {
      if (f.section != section) continue;
      out << YAML::Key << f.key << YAML::Value;
      const std::string value = f.get(config);
      // Quoted strings stay strings ("", "yes", "123"); the emitter quotes when it must.
      if (f.is_text) {
        out << YAML::DoubleQuoted << value;
      } else {
        out << value;
      }
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace wf::config
