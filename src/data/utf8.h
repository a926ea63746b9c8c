#pragma once
// UTF-8 validation (internal), shared by the readers of text a person wrote: documents for
// `prepare-text` (data/documents.h) and run configs (config/yaml_input.h).
#include <cstddef>
#include <string_view>

namespace wf::data {

// The offset of the first byte of `text` that is not part of well-formed UTF-8 (an overlong
// form, a surrogate, past U+10FFFF, a truncated sequence), or npos.
std::size_t first_invalid_utf8(std::string_view text);

}  // namespace wf::data
