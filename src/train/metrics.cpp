#include "wallfacer/train/metrics.h"

#include <cmath>
#include <filesystem>
#include <vector>
#include <nlohmann/json.hpp>

#include "wallfacer/core/error.h"

namespace wf::train {
namespace {

// JSON has no NaN or infinity: a diverged loss is written as null, which plotting tools skip.
nlohmann::ordered_json number(double x) { return std::isfinite(x) ? nlohmann::ordered_json(x) : nullptr; }

std::string si(double x) {
  const char* suffix[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  while (std::abs(x) >= 1000.0 && i < 5) x /= 1000.0, ++i;
  return fmt::format("{:.1f}{}", x, suffix[i]);
}

}  // namespace

std::string to_json(const StepMetrics& m) {
  nlohmann::ordered_json j;
  j["step"] = m.step;
  j["loss"] = number(m.loss);
  if (m.val_loss >= 0) j["val_loss"] = number(m.val_loss);
  if (m.pp_bubble >= 0) {
    j["pp_bubble"] = number(m.pp_bubble);
    j["pp_bubble_ideal"] = number(m.pp_bubble_ideal);
  }
  j["lr"] = m.lr;
  j["grad_norm"] = number(m.grad_norm);
  j["step_s"] = m.step_seconds;
  j["tokens_per_s"] = m.tokens_per_s;
  j["flops_per_s"] = m.flops_per_s;
  j["mfu"] = m.mfu;
  j["p2p_bytes"] = m.p2p_bytes;
  j["collective_bytes"] = m.collective_bytes;
  j["bytes_by_group"] = m.bytes_by_group;
  j["allocated_mem_bytes"] = m.allocated_mem_bytes;
  j["reserved_mem_bytes"] = m.reserved_mem_bytes;
  j["peak_mem_bytes"] = m.peak_mem_bytes;
  j["cached_mem_bytes"] = m.cached_mem_bytes;
  j["elapsed_s"] = m.elapsed_seconds;
  j["host_syncs_per_step"] = m.host_syncs_per_step;
  j["staging_syncs_per_step"] = m.staging_syncs_per_step;
  return j.dump();
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<std::int64_t>(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

std::string progress_line(const StepMetrics& m) {
  const double eta = m.step_seconds * static_cast<double>(std::max<std::int64_t>(m.total_steps - m.step, 0));
  std::string line = fmt::format("step {}/{} | loss {:.4f}", m.step, m.total_steps, m.loss);
  if (m.val_loss >= 0) line += fmt::format(" | val {:.4f}", m.val_loss);
  line += fmt::format(" | lr {:.2e} | gnorm {:.3f} | {} tok/s | {}FLOP/s (MFU {:.1f}%) | {:.0f} ms/step | ETA {}",
                      m.lr, m.grad_norm, si(m.tokens_per_s), si(m.flops_per_s), 100.0 * m.mfu,
                      1000.0 * m.step_seconds, format_duration(eta));
  return line;
}

MetricsLog::MetricsLog(const std::string& path, std::int64_t resumed_step) : path_(path) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  WF_CHECK(!ec, "metrics: cannot create the directory {}: {}; set log.dir to a writable directory",
           p.parent_path().string(), ec.message());
  std::vector<std::string> kept;
  if (resumed_step > 0) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<std::int64_t>() <= resumed_step) {
        kept.push_back(line);
      }
    }
  }
  out_.open(path, std::ios::trunc);
  for (const std::string& line : kept) out_ << line << '\n';
  out_.flush();
  WF_CHECK(out_.good(), "metrics: cannot open {} for writing; set log.dir to a writable directory", path);
}

void MetricsLog::write(const StepMetrics& m) {
  out_ << to_json(m) << '\n';
  out_.flush();
  WF_CHECK(out_.good(), "metrics: writing {} failed (disk full?)", path_);
}

}  // namespace wf::train
