#pragma once
// The modes of `wallfacer tune` that run on this machine, each in its own file:
//   --calibrate  measures this machine (its CPU or each rank's --device) under mpirun and writes a
//                cluster file (tune_calibrate.cpp)
//   --profile    predicts every layout of the mpirun world, runs the top k and compares
//                (tune_profile.cpp)
// Both predicting modes end with the same advice on the best layout (tune_advice.cpp).
// tune_command.cpp parses the options, predicts (the default mode) and dispatches to these.
#include <cstdint>
#include <string>
#include <vector>

#include "wallfacer/config/run_config.h"

namespace wf::cli {

// "mpirun -np N build/wallfacer train CFG --set k=v ...": trains `best`, with a --set for every
// key where it differs from `file_config` (the file at config_path as it stands), shell-quoted.
std::string train_command_line(const std::string& config_path, const config::RunConfig& file_config,
                               const config::RunConfig& best, int world);
// Under tune's answer (tune_advice.cpp): the best layout's name field by field (tune::layout_parts),
// the command line that trains it, and the --write-best file (written, or how to get one).
void print_best_layout_advice(const std::string& config_path, const config::RunConfig& best, int world,
                              const std::string& write_best);

// The cluster file --cluster names, or calibration.yaml in the working directory when it is not
// given and that file exists; a wf::UserError naming both fixes otherwise.
std::string cluster_path_or_default(const std::string& given);

struct CalibrateOptions {
  std::string out = "calibration.yaml";
  double seconds = 0.1;  // timed seconds per measurement round (five rounds, the median kept)
  std::string device = "cpu";      // where each rank measures: cpu, cuda, testdev or auto (train.device's words)
  std::string transport = "auto";  // how device tensors travel: auto, nccl or staged (comm.gpu_transport's)
};
// Under mpirun (or alone): every rank measures at the same time; rank 0 writes `out`.
int run_tune_calibrate(const CalibrateOptions& options);

struct ProfileOptions {
  std::string config;  // the run config whose model and batch to lay out
  std::vector<std::string> overrides;
  std::string cluster;  // "" → cluster_path_or_default
  std::int64_t seq = 0;
  bool sp_only = false;
  int top = 3;
  int steps = 2;
  std::string plot;        // a PNG of predicted vs measured step times, drawn by gnuplot
  std::string write_best;  // the measured winner as a run config
};
// Under mpirun: predicts every layout of the world, runs the top `top` a few steps each.
int run_tune_profile(const ProfileOptions& options);

}  // namespace wf::cli
