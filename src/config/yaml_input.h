#pragma once
// The input side of the config loader (internal): reading a config file and parsing its text
// into one YAML document, with every way that can go wrong reported as a wf::UserError that
// names the file (and the line) and what to do, before yaml-cpp gets a chance to crash or hang.
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "src/data/utf8.h"

namespace wf::config::detail {

// A run config is a few KiB; anything past this is the wrong file (a data set, a checkpoint).
inline constexpr std::size_t kMaxConfigBytes = std::size_t{1} << 20;
// Collections nested deeper than this are refused before yaml-cpp parses them: its parser
// recurses once per level (a run config needs 2: section, key).
inline constexpr int kMaxConfigNesting = 32;

// YAML text is UTF-8 (data/utf8.h), and yaml-cpp's emitter replaces what is not with U+FFFD:
// to_yaml would write another path.
using data::first_invalid_utf8;

// The text of the config file `path`: a regular file or a pipe (`<(...)`). wf::UserError naming
// the file when it is missing, unreadable, a directory or a device, or larger than
// kMaxConfigBytes.
std::string read_config_file(const std::string& path);

// The single YAML document of `text` (read from `source`, which messages name): a null node for
// an empty text. wf::UserError naming the source and line for a text over kMaxConfigBytes, a
// NUL byte, invalid UTF-8, nesting past kMaxConfigNesting, a syntax error or a second document.
YAML::Node parse_yaml_document(std::string_view text, std::string_view source);

}  // namespace wf::config::detail
