// `wallfacer checkpoint info DIR` and `wallfacer checkpoint export DIR OUT.safetensors
// [--optimizer]`: what a checkpoint (format 3 or 4, any layout) holds, every file's checksum
// verified; and the whole model as one safetensors file of global names and unpadded tensors,
// the same bytes whatever layout wrote the checkpoint (docs/checkpoints.md).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "src/cli/commands.h"
#include "wallfacer/parallel/sp_attention.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/core/error.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/distributed_checkpoint.h"
#include "wallfacer/train/safetensors.h"

namespace wf::cli {
namespace {

namespace fs = std::filesystem;

struct CheckpointOptions {
  std::string dir;
  std::string out;
  bool optimizer = false;
};

// A step-* directory, or the newest complete one of a checkpoint.dir.
std::string checkpoint_dir(const std::string& path) {
  WF_USER_CHECK(fs::exists(path), "{}: no such directory; give a checkpoint (a step-* directory) or checkpoint.dir of "
                "a run", path);
  if (fs::exists(fs::path(path) / "manifest.json")) return path;
  const std::vector<std::string> complete = train::CheckpointStore(path, 0).list();
  WF_USER_CHECK(!complete.empty(), "{}: holds no manifest.json and no complete checkpoint (step-*/manifest.json); "
                "give a step-* directory of checkpoint.dir", path);
  return complete.back();
}

// "dp 2 x tp 2 x sp 2 (WallFacer C 2)" from the config saved in the checkpoint.
std::string layout_text(const train::CheckpointReader& reader) {
  try {
    const config::RunConfig c = config::parse_config(reader.config_yaml(), {}, reader.dir() + "/manifest.json");
    const auto& p = c.parallel;
    return fmt::format("dp {} x tp {} x sp {} (sp strategy {}, C {})", p.dp, p.tp, p.sp,
                       parallel::sp_strategy_name(p.sp_strategy), p.C);
  } catch (const Error& e) {
    return fmt::format("unknown (the saved config does not parse: {})", e.what());
  }
}

int info(const CheckpointOptions& o) {
  train::CheckpointReader reader(checkpoint_dir(o.dir));
  reader.verify_all_files();
  std::uint64_t total = 0;
  for (const auto& [file, bytes] : reader.files()) total += bytes;
  std::printf("checkpoint %s\n", reader.dir().c_str());
  std::printf("format version %lld, step %lld\n", static_cast<long long>(reader.version()),
              static_cast<long long>(reader.step()));
  const std::string world = reader.world_size() > 0 ? std::to_string(reader.world_size()) : "not recorded (version 3)";
  std::printf("layout: %s, world size %s\n", layout_text(reader).c_str(), world.c_str());
  std::printf("files: %zu, %llu bytes, all SHA-256 checksums verified\n", reader.files().size(),
              static_cast<unsigned long long>(total));
  std::printf("tensors: %zu\n", reader.tensors().size());
  std::size_t width = 0;
  for (const auto& t : reader.tensors()) width = std::max(width, t.key.size());
  for (const auto& t : reader.tensors()) {
    const auto bytes = static_cast<unsigned long long>(shape_numel(t.shape)) * dtype_size(t.dtype);
    std::printf("  %-*s %-4s %-16s %12llu bytes  %zu piece%s\n", static_cast<int>(width), t.key.c_str(),
                dtype_name(t.dtype), shape_str(t.shape).c_str(), bytes, t.pieces.size(),
                t.pieces.size() == 1 ? "" : "s");
  }
  return kExitOk;
}

int export_checkpoint(const CheckpointOptions& o) {
  WF_USER_CHECK(o.out.ends_with(".safetensors"), "{}: the output must be a .safetensors file (e.g. model.safetensors)",
                o.out);
  const std::string dir = checkpoint_dir(o.dir);
  const std::size_t count = train::export_checkpoint(dir, o.out, o.optimizer);
  std::printf("exported %zu tensors of checkpoint %s to %s\n", count, dir.c_str(), o.out.c_str());
  return kExitOk;
}

}  // namespace

void add_checkpoint_command(CLI::App& app) {
  CLI::App* group = app.add_subcommand("checkpoint", "Inspect and export training checkpoints");
  group->require_subcommand(1);
  auto options = std::make_shared<CheckpointOptions>();

  CLI::App* info_command = group->add_subcommand("info", "Format, step, layout and tensors of a checkpoint; verifies "
                                                 "every file's checksum");
  info_command->add_option("dir", options->dir, "A step-* directory (or checkpoint.dir: its newest)")->required();
  set_action(*info_command, [options] { return info(*options); });

  CLI::App* export_command = group->add_subcommand(
      "export", "The whole model as one safetensors file (global names, unpadded tensors), whatever layout wrote it");
  export_command->add_option("dir", options->dir, "A step-* directory (or checkpoint.dir: its newest)")->required();
  export_command->add_option("out", options->out, "The file to write, e.g. model.safetensors")->required();
  export_command->add_flag("--optimizer", options->optimizer, "Include the optimizer state (<parameter>.<field>)");
  set_action(*export_command, [options] { return export_checkpoint(*options); });
}

}  // namespace wf::cli
