// The `wallfacer` executable: parses the command line, then runs the selected command.
// Every failure ends as one line "wallfacer: error: <message>" on stderr and exit status
// 2 (usage) or 1 (runtime); --help and --version print to stdout and exit 0.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "src/cli/commands.h"
#include "src/config/schema.h"
#include "wallfacer/build_info.h"
#include "wallfacer/core/error.h"

namespace wf::cli {
namespace {

Action& selected_action() {
  static Action action;
  return action;
}

// The deepest subcommand the parser reached ("bench" in `wallfacer bench nope`).
const CLI::App& deepest_command(const CLI::App& app) {
  const CLI::App* current = &app;
  while (!current->get_subcommands().empty()) current = current->get_subcommands().front();
  return *current;
}

// "wallfacer bench": the words that select `command`, so a usage error can point at its --help.
std::string command_path(const CLI::App& command) {
  std::string path = command.get_name();
  for (const CLI::App* parent = command.get_parent(); parent != nullptr; parent = parent->get_parent()) {
    path = parent->get_name() + " " + path;
  }
  return path;
}

// "; did you mean 'train'?" when `word` is a near miss (edit distance 2) of one of the commands; "".
std::string command_suggestion(const std::string& word, const std::vector<const CLI::App*>& commands) {
  std::vector<std::string> names;
  for (const CLI::App* command : commands) names.push_back(command->get_name());
  const std::string close = wf::config::detail::closest_spelling(word, names);
  return close.empty() ? "" : "; did you mean '" + close + "'?";
}

// One line that says what was wrong and where to read about it. CLI11 reports both a missing
// and a misspelt command as "A subcommand is required"; say which, and name the word.
std::string usage_message(const CLI::App& app, const CLI::ParseError& e) {
  const CLI::App& command = deepest_command(app);
  const auto choices = command.get_subcommands(std::function<bool(const CLI::App*)>());
  std::string message = e.what();
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && !choices.empty()) {
    const std::vector<std::string> leftover = command.remaining();
    if (leftover.empty()) {
      message = "missing command: expected one of";
      for (const CLI::App* choice : choices) message += (choice == choices.front() ? " " : ", ") + choice->get_name();
    } else {
      const std::string& word = leftover.front();
      message = word.starts_with('-') ? "unknown option '" + word + "'"
                                      : "unknown command '" + word + "'" + command_suggestion(word, choices);
    }
  }
  return message + " (see '" + command_path(command) + " --help')";
}

}  // namespace

void set_action(CLI::App& command, Action action) {
  command.callback([action = std::move(action)] { selected_action() = action; });
}

void print_error(std::string_view message) {
  // Multi-line messages (CLI11 and nested errors produce some) are folded so that scripts and
  // logs see exactly one line per failure.
  std::string line(message);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  std::fprintf(stderr, "wallfacer: error: %s\n", line.c_str());
}

}  // namespace wf::cli

int main(int argc, char** argv) {
  using namespace wf::cli;
  CLI::App app{"wallfacer: trains long-sequence transformers with WallFacer multi-ring sequence parallelism",
               "wallfacer"};
  app.set_version_flag("--version", std::string("wallfacer ") + WF_VERSION);
  app.require_subcommand(1);

  add_info_command(app);
  add_demo_command(app);
  add_grid_command(app);
  add_validate_command(app);
  add_prepare_text_command(app);
  add_train_command(app);
  add_generate_command(app);
  add_sample_command(app);
  add_checkpoint_command(app);
  add_tune_command(app);
  CLI::App& bench = add_bench_group(app);
  add_bench_kernels_command(bench);
  add_bench_comm_command(bench);
  add_bench_attention_command(bench);
  add_bench_gpt_command(bench);
  add_bench_layout_command(bench);
  add_bench_device_command(bench);

  // `-np N` (mpirun's spelling, used by `wallfacer validate cfg.yaml -np 4`) is read as the
  // long option --np: CLI11 only knows one-letter short options.
  std::vector<std::string> args(argv + 1, argv + argc);
  for (auto& arg : args) {
    if (arg == "-np") arg = "--np";
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments in reverse order

  try {
    app.parse(args);
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error(usage_message(app, e));
    return kExitUsageError;
  } catch (const std::exception& e) {  // a check inside an option's validation
    print_error(e.what());
    return kExitUsageError;
  }

  try {
    return selected_action() ? selected_action()() : kExitOk;
  } catch (const wf::Error& e) {
    print_error(e.what());
  } catch (const std::exception& e) {
    print_error(std::string("unexpected failure: ") + e.what());
  }
  return kExitRuntimeError;
}
