#pragma once
// JSON read from a file (a safetensors header, a checkpoint manifest), parsed with a bound on its
// nesting. nlohmann builds a deep document without recursion but dumps it (as the error messages
// do) recursively, so a few MB of "[[[[..." would overflow the stack instead of being refused.
#include <nlohmann/json.hpp>
#include <string>

#include "wallfacer/core/error.h"

namespace wf::train::detail {

// serde_json, which the reference safetensors implementation parses with, stops at 128 levels;
// the files here need 3.
inline constexpr int kMaxJsonDepth = 128;

// Parses `text`, refusing it (wf::Error naming `what`) as soon as it opens a level past
// kMaxJsonDepth; invalid JSON throws nlohmann's exception as Json::parse does.
inline nlohmann::ordered_json parse_bounded_json(const std::string& text, const std::string& what) {
  using Json = nlohmann::ordered_json;
  return Json::parse(text, [&](int depth, Json::parse_event_t event, Json&) {
    // `depth` is that of the object or array being opened: 0 for the outermost one.
    const bool opens = event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start;
    WF_CHECK(!opens || depth < kMaxJsonDepth,
             "{} nests JSON deeper than {} levels: the file is corrupt or not what it claims to be", what,
             kMaxJsonDepth);
    return true;
  });
}

}  // namespace wf::train::detail
