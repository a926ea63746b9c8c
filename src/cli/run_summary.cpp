// run_summary: run_summary.h.
#include "src/cli/run_summary.h"

#include <fmt/format.h>

#include <filesystem>

#include "src/cli/rank_count.h"
#include "src/cli/stop_signal.h"
#include "wallfacer/config/model_schema.h"
#include "wallfacer/train/metrics.h"

namespace wf::cli {

std::vector<std::string> run_summary(const config::RunConfig& config, const RunInvocation& run,
                                     const train::Trainer::FitSummary& fit) {
  std::vector<std::string> lines;
  const std::string metrics = (std::filesystem::path(config.log.dir) / config.log.metrics_file).string();
  if (fit.last_step >= fit.first_step) {
    std::string line = fmt::format("summary: steps {}-{} in {} ({:.0f} tokens/s); loss {:.4f} -> {:.4f}",
                                   fit.first_step, fit.last_step, train::format_duration(fit.wall_seconds),
                                   fit.wall_seconds > 0 ? static_cast<double>(fit.tokens) / fit.wall_seconds : 0.0,
                                   fit.first_loss, fit.last_loss);
    line += fit.best_val_loss < 0
                ? std::string("; no validation ran")
                : fmt::format("; best val loss {:.4f} (step {})", fit.best_val_loss, fit.best_val_step);
    lines.push_back(line);
  }
  lines.push_back(fmt::format("summary: metrics in {}; checkpoints in {}{}", metrics, config.checkpoint.dir,
                              fit.last_checkpoint.empty() ? std::string(" (none saved by this run)")
                                                          : fmt::format(" (newest: {})", fit.last_checkpoint)));
  if (fit.stopped_for != 0) {
    lines.push_back(fmt::format("stopped by {} after step {}: resume with `{}`", signal_name(fit.stopped_for),
                                fit.last_step, train_command_line(run.world_size, run.config_path, run.overrides)));
    return lines;
  }
  std::string sets;
  for (const std::string& set : run.overrides) sets += " --set " + shell_word(set);
  const std::string program = shell_word(program_path());
  if (config::model_facts(config).vocab_size > 0) {
    lines.push_back(fmt::format("next: {} generate --checkpoint {} --prompt 'In the beginning'", program,
                                shell_word(config.checkpoint.dir)));
  } else {
    lines.push_back(fmt::format("next: {} sample {}{} --checkpoint {} --out samples.png", program,
                                shell_word(run.config_path), sets, shell_word(config.checkpoint.dir)));
  }
  lines.push_back(fmt::format("next: scripts/plot-metrics.sh {}", shell_word(metrics)));
  return lines;
}

}  // namespace wf::cli
