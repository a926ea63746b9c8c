#pragma once
// The table of every config key: its section, name, expected type and range, and how to read
// and print its value. Loading, --set overrides and to_yaml all go through this one table, so a
// key is declared once (schema.cpp). Private to src/config.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/config/run_config.h"
#include "wallfacer/config/value_text.h"

namespace wf::config::detail {

struct Field {
  std::string section, key;
  std::string expected;  // "an integer >= 1", "one of ring, ulysses, wallfacer", ...
  bool is_text = false;  // a string key: a YAML null reads as ""
  bool is_list = false;  // a list of integers: a YAML sequence [3, 5] reads as the text "[3, 5]"
  // Parses `text` into the config; returns "" when it fits, otherwise why it does not
  // ("is not an integer", "is out of range").
  std::function<std::string(RunConfig&, std::string_view text)> set;
  std::function<std::string(const RunConfig&)> get;  // text that `set` reads back to the same value
  std::string path() const { return section + "." + key; }
};

const std::vector<Field>& fields();
const std::vector<std::string>& section_names();
// nullptr when the section has no such key.
const Field* find_field(std::string_view section, std::string_view key);
bool is_section(std::string_view section);

// "unknown section 'trian' (did you mean 'train'?); the sections are model, parallel, ..."
std::string unknown_section_message(std::string_view section);
// "unknown key 'train.stpes' (did you mean 'train.steps'?); the keys of section 'train' are ..."
std::string unknown_key_message(std::string_view section, std::string_view key);
// "train.steps: 'ten' is not an integer; expected an integer >= 1"
std::string value_message(const Field& field, std::string_view text, std::string_view problem);

// The candidate closest to `word` within edit distance 2 (optimal string alignment, so a swap
// of neighbours counts 1); "" when none is that close. Ties go to the earlier candidate.
std::string closest_spelling(std::string_view word, const std::vector<std::string>& candidates);

// Drops the " (file.cpp:123)" that WF_CHECK appends, for messages nested inside another.
std::string without_location(std::string message);

}  // namespace wf::config::detail
