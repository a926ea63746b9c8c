#include "wallfacer/core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "wallfacer/core/error.h"

namespace wf::log {
namespace {

struct State {
  std::shared_ptr<spdlog::logger> logger;
  std::atomic<int> level{static_cast<int>(Level::info)};
  std::atomic<int> rank{0};
  std::atomic<int> world{1};
  std::atomic<bool> all_ranks{false};

  State() {
    logger = spdlog::stderr_color_mt("wallfacer");
    logger->set_level(spdlog::level::trace);  // filtering happens in enabled()
    set_pattern();
    if (const char* env = std::getenv("WF_LOG_LEVEL")) {
      try {
        level = static_cast<int>(parse_level(env));
      } catch (const Error& e) {
        logger->warn("ignoring WF_LOG_LEVEL: {}", e.what());
      }
    }
    if (const char* env = std::getenv("WF_LOG_ALL_RANKS")) all_ranks = std::string(env) == "1";
  }
  void set_pattern() {
    if (world > 1) {
      logger->set_pattern(fmt::format("[%H:%M:%S.%e] [rank {}/{}] [%^%l%$] %v", rank.load(), world.load()));
    } else {
      logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    }
  }
};

State& state() {
  static State s;
  return s;
}

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::trace: return spdlog::level::trace;
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    case Level::error: return spdlog::level::err;
    case Level::off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

bool enabled(Level level) {
  auto& s = state();
  if (level == Level::off || static_cast<int>(level) < s.level.load()) return false;
  // Errors always print on every rank: a failure on rank 5 must not be silent.
  return level >= Level::error || s.all_ranks.load() || s.rank.load() == 0;
}

void write(Level level, std::string_view message) { state().logger->log(to_spdlog(level), "{}", message); }

void set_level(Level level) { state().level = static_cast<int>(level); }

Level parse_level(std::string_view name) {
  if (name == "trace") return Level::trace;
  if (name == "debug") return Level::debug;
  if (name == "info") return Level::info;
  if (name == "warn" || name == "warning") return Level::warn;
  if (name == "error") return Level::error;
  if (name == "off") return Level::off;
  WF_FAIL("unknown log level '{}': expected trace, debug, info, warn, error or off", name);
}

void set_rank(int rank, int world_size) {
  auto& s = state();
  s.rank = rank;
  s.world = world_size;
  s.set_pattern();
}

void set_all_ranks(bool all) { state().all_ranks = all; }

}  // namespace wf::log
