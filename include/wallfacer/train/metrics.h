#pragma once
// What the trainer measures each logged step, and where it goes: one JSON object per line in
// <log.dir>/<log.metrics_file> (scripts/plot-metrics.sh draws it) and a progress line on rank 0.
#include <cstdint>
#include <fstream>
#include <map>
#include <string>

namespace wf::train {

struct StepMetrics {
  std::int64_t step = 0;           // optimizer steps done (1-based after the first)
  std::int64_t total_steps = 0;
  double loss = 0;                 // mean over every target token of the step's global batch
  double lr = 0;                   // the rate this step used
  double grad_norm = 0;            // global L2 norm before clipping
  double step_seconds = 0;         // wall time of the step (mean over the logged interval)
  double tokens_per_s = 0;         // tokens of the global batch per second, whole job
  double flops_per_s = 0;          // model FLOP/s of the whole job (Model::train_flops_per_token)
  double mfu = 0;                  // flops_per_s / (ranks × configured per-rank peak)
  std::int64_t p2p_bytes = 0;      // bytes this rank sent point-to-point per step
  std::int64_t collective_bytes = 0;  // bytes this rank sent in collectives per step
  std::map<std::string, std::int64_t> bytes_by_group;  // bytes sent per step, by group name
  // Memory of this rank's device (train.device), as wf::memory_stats counts it.
  std::int64_t allocated_mem_bytes = 0;  // bytes held in tensors now
  std::int64_t reserved_mem_bytes = 0;   // those plus what the caching allocator keeps for reuse
  std::int64_t peak_mem_bytes = 0;    // peak bytes held in tensors on this rank so far
  std::int64_t cached_mem_bytes = 0;  // freed bytes the caching allocator keeps for reuse, now
  double elapsed_seconds = 0;         // since the run (or the resume) started
  // Host synchronisations (core/stream.h host_sync_count) per step over the logged interval,
  // this rank's, without MPI's staging of device tensors: the step's target is one per logged
  // step, the read of the interval's losses. Staging (a device without a transport of its own,
  // like the test device) apart: a GPU with NCCL makes none.
  double host_syncs_per_step = 0;
  double staging_syncs_per_step = 0;
  double val_loss = -1;               // < 0: not evaluated at this step
  // Pipeline parallelism (pp > 1; < 0 otherwise): the measured bubble, time the pp ranks waited
  // for a neighbour over the time they computed (mean over the pp group and the interval), and
  // the schedule's ideal (p − 1)/m, or (p − 1)/(v·m) interleaved.
  double pp_bubble = -1;
  double pp_bubble_ideal = -1;
};

// The object written to metrics.jsonl, e.g. {"step":10,"loss":2.31,"lr":0.001,...}.
std::string to_json(const StepMetrics& m);
// "step 120/2000 | loss 2.3112 | lr 1.00e-03 | 48.1k tok/s | 2.1 GFLOP/s (MFU 1.2%) | ETA 3m12s"
std::string progress_line(const StepMetrics& m);
// "3m12s", "1h04m", "45s".
std::string format_duration(double seconds);

// Appends JSON lines to a file (created with its directory); every line is flushed at once, so
// a killed run keeps all that it logged.
class MetricsLog {
 public:
  // A fresh run (resumed_step 0) starts an empty file. A run resumed at step s keeps the lines
  // of steps <= s and drops the later ones, which the killed run logged after its last
  // checkpoint and the resumed run will log again.
  MetricsLog(const std::string& path, std::int64_t resumed_step);
  void write(const StepMetrics& m);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace wf::train
