// `wallfacer train CFG.yaml [--set section.key=value]... [--no-resume] [--stop-after N]`: trains the
// configured model under mpirun (`mpirun -np 4 wallfacer train configs/gpt-tiny.yaml`). The
// config is validated against the world size first, with the same message on every rank; a
// run resumes from the newest valid checkpoint in checkpoint.dir unless --no-resume, which
// starts at step 0 and is refused when checkpoint.dir already holds checkpoints.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/cli/commands.h"
#include "src/cli/option_checks.h"
#include "src/cli/rank_agreement.h"
#include "src/cli/rank_count.h"
#include "src/cli/run_summary.h"
#include "src/cli/stop_signal.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/comm/group.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/machine.h"
#include "wallfacer/core/log.h"
#include "wallfacer/train/output_dirs.h"
#include "wallfacer/train/trainer.h"

namespace wf::cli {
namespace {

// From this size on `train` says what it is building before it builds it.
constexpr std::int64_t kLargeModelParameters = 100'000'000;

struct TrainOptions {
  std::string path;
  std::vector<std::string> overrides;
  bool no_resume = false;
  std::int64_t stop_after = 0;
};

int train(const TrainOptions& o) {
  comm::Runtime& runtime = comm::Runtime::get();
  const config::RunConfig config = config::load_config(o.path, o.overrides);
  // The smallest machine of the job and the most ranks on one machine decide the memory check, so
  // every rank reaches the same verdict and message even on nodes of different sizes (one
  // collective before validate: the minimum of the memory and of the negated local rank count).
  Tensor machine = Tensor::from_vector(
      std::vector<double>{static_cast<double>(machine_memory_bytes()), -static_cast<double>(runtime.local_size())},
      {2});
  runtime.world().all_reduce(machine, comm::ReduceOp::min);
  const double machine_bytes = machine.data<double>()[0];
  const int ranks_per_machine = static_cast<int>(-machine.data<double>()[1]);
  check_rank_count(config, runtime.world_size(), o.path, o.overrides, RankCountCommand::train,
                   config::ValidateScope::this_machine, machine_bytes, ranks_per_machine);
  config::validate(config, runtime.world_size(), config::ValidateScope::this_machine, machine_bytes,
                   ranks_per_machine);
  log::info("config: {}", config::summary(config, runtime.world_size()));
  for (const std::string& note : config::notes(config)) log::warn("{}", note);
  // Rank 0 writes the checkpoints and the metrics: an unwritable directory fails the job now,
  // not at the first save; so does a fresh start (--no-resume) into another run's checkpoints.
  check_on_rank0_for_all(runtime.world(), [&] {
    train::check_output_dirs(config);
    if (o.no_resume) train::check_no_checkpoints(config.checkpoint.dir);
  });
  comm::CommGrid grid(comm::ProcessGrid(config.parallel.grid(), runtime.world_size(), runtime.rank()));
  const std::int64_t whole = static_cast<std::int64_t>(config::model_facts(config).parameters);
  // Building (and initialising) a large model takes a while before the first step says anything.
  if (whole >= kLargeModelParameters) {
    log::info("building model {} with {} parameters; this can take minutes", config.model.name, whole);
  }
  train::Trainer trainer(config, grid);
  if (!o.no_resume && trainer.resume() && trainer.step() >= config.train.steps) {
    log::info("the checkpoint is at step {} = train.steps: nothing to train (raise train.steps to continue)",
              trainer.step());
    return kExitOk;
  }
  const std::int64_t held = trainer.model().num_parameters();
  log::info("model: {} with {} parameters{}; {} tokens per step", config.model.name, whole,
            held == whole ? std::string() : fmt::format(" ({} on this rank)", held), trainer.tokens_per_step());
  // From here a first SIGINT / SIGTERM saves a checkpoint at the next step boundary (stop_signal.h).
  catch_stop_signals();
  trainer.set_stop_request([] { return stop_signal(); });
  trainer.fit(o.stop_after);
  const train::Trainer::FitSummary& fit = trainer.fit_summary();
  if (fit.stopped_for != 0) ignore_stop_signals();
  if (runtime.rank() == 0) {
    for (const std::string& line : run_summary(config, {o.path, o.overrides, runtime.world_size()}, fit)) {
      log::info("{}", line);
    }
  }
  return fit.stopped_for != 0 ? 128 + fit.stopped_for : kExitOk;
}

}  // namespace

void add_train_command(CLI::App& app) {
  CLI::App* command =
      app.add_subcommand("train", "Train the model of a run config (YAML); run under mpirun for several ranks");
  auto options = std::make_shared<TrainOptions>();
  command->add_option("config", options->path, "The run config, e.g. configs/gpt-tiny.yaml")->required();
  command->add_option("--set", options->overrides, "Override one key, e.g. --set train.lr=3e-4 (repeatable)");
  command->add_flag("--no-resume", options->no_resume,
                    "Start a new run at step 0 (refused when checkpoint.dir already holds checkpoints)");
  command->add_option("--stop-after", options->stop_after,
                      "Stop once this many steps are done, as if the job were killed there (tests resume)")
      ->check(positive());
  set_action(*command, [options] {
    // An error on every rank is reported once; one on a single rank ends every rank (none waits forever).
    return run_main_reporting_once([&] { return train(*options); });
  });
}

}  // namespace wf::cli
