#pragma once
// wf::log: the framework's logger (spdlog underneath, kept out of public headers).
// Level from the environment variable WF_LOG_LEVEL (trace, debug, info, warn, error, off;
// default info). In a distributed run every line carries the rank prefix "[rank r/w]";
// by default only rank 0 prints, set_all_ranks(true) or WF_LOG_ALL_RANKS=1 lets every rank.
#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace wf::log {

enum class Level { trace, debug, info, warn, error, off };

bool enabled(Level level);
void write(Level level, std::string_view message);
void set_level(Level level);
Level parse_level(std::string_view name);  // wf::Error naming the valid levels otherwise
void set_rank(int rank, int world_size);
void set_all_ranks(bool all);

template <typename... Args>
void trace(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::trace)) write(Level::trace, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::debug)) write(Level::debug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::info)) write(Level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::warn)) write(Level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::error)) write(Level::error, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace wf::log
