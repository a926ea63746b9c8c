#include "wallfacer/train/checkpoint.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <utility>

#include "src/core/atomic_file.h"
#include "src/train/checkpoint_files.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"
#include "wallfacer/nn/module.h"
#include "wallfacer/train/distributed_checkpoint.h"

namespace wf::train {
namespace {

namespace fs = std::filesystem;
using detail::Json;

}  // namespace

CheckpointStore::CheckpointStore(std::string dir, std::int64_t keep) : dir_(std::move(dir)), keep_(keep) {
  WF_CHECK(!dir_.empty(), "checkpoint store: the directory is empty; name one (e.g. checkpoints/)");
  WF_CHECK(keep_ >= 0, "checkpoint store: keep must be 0 (keep all) or more, not {}", keep_);
}

std::string CheckpointStore::save(const Checkpoint& checkpoint) {
  WF_CHECK(checkpoint.step >= 0, "checkpoint store: cannot save step {}: steps are non-negative", checkpoint.step);
  const fs::path store(dir_);
  detail::remove_tmp_leftovers(store);
  const fs::path tmp_dir = detail::make_tmp_dir(store, checkpoint.step);
  fs::path final_dir;
  try {
    Json manifest =
        detail::manifest_head(detail::kWholeTensorVersion, checkpoint.step, checkpoint.config_yaml, checkpoint.state);
    Json files = Json::object();
    for (const auto& [name, tensors] : {std::pair{detail::kModelFile, &checkpoint.model},
                                        std::pair{detail::kOptimizerFile, &checkpoint.optimizer}}) {
      const detail::WrittenFile file = detail::write_hashed_safetensors(tmp_dir, name, *tensors);
      files[file.name] = {{"bytes", file.bytes}, {"sha256", file.sha256}};
    }
    manifest["files"] = std::move(files);
    const std::string manifest_path = (tmp_dir / detail::kManifest).string();
    const std::string text = detail::sealed_manifest_text(std::move(manifest), manifest_path);
    wf::detail::write_file_atomically(manifest_path, {{text.data(), text.size()}}, "checkpoint");
    final_dir = detail::commit_checkpoint_dir(store, tmp_dir, checkpoint.step);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp_dir, ignored);
    throw;
  }
  detail::prune_checkpoints(store, final_dir, keep_);
  return final_dir.string();
}

Checkpoint CheckpointStore::load(const std::string& checkpoint_dir) const {
  // Through the piece reader, which reads both formats: whole tensors are the pieces of one
  // process's layout.
  CheckpointReader reader(checkpoint_dir);
  Checkpoint checkpoint = reader.header();
  for (const CheckpointReader::TensorInfo& info : reader.tensors()) {
    (is_optimizer_key(info.key) ? checkpoint.optimizer : checkpoint.model).insert(info.key, reader.load_whole(info.key));
  }
  return checkpoint;
}

std::optional<std::string> CheckpointStore::find_latest(const std::function<void(const std::string&)>& try_load,
                                                        std::optional<std::int64_t> at_most) const {
  auto candidates = detail::step_dirs(fs::path(dir_), /*with_manifest=*/false);
  if (at_most) std::erase_if(candidates, [&](const auto& entry) { return entry.first > *at_most; });
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    try {
      try_load(it->second.string());
      return it->second.string();
    } catch (const Error& e) {
      log::warn("skipping checkpoint '{}': {}", it->second.string(), e.what());
    }
  }
  // Starting from scratch over checkpoints that exist but do not load would silently lose a run.
  WF_CHECK(candidates.empty(),
           "none of the {} checkpoints in '{}' loads (the warnings above say why); a checkpoint of another format "
           "version needs the wallfacer that wrote it, a damaged one can be deleted to start from scratch",
           candidates.size(), dir_);
  return std::nullopt;
}

std::optional<Checkpoint> CheckpointStore::load_latest(const CheckpointCheck& check,
                                                       std::optional<std::int64_t> at_most) const {
  std::optional<Checkpoint> found;
  find_latest(
      [&](const std::string& dir) {
        Checkpoint checkpoint = load(dir);
        if (check) check(checkpoint);
        found = std::move(checkpoint);
      },
      at_most);
  return found;
}

std::optional<std::uint64_t> state_uint(const Checkpoint& checkpoint, const std::string& key, std::uint64_t max) {
  const auto it = checkpoint.state.find(key);
  if (it == checkpoint.state.end()) return std::nullopt;
  const std::string& text = it->second;
  // from_chars into an unsigned type refuses a sign, spaces and values past 2^64 - 1.
  std::uint64_t value = 0;
  const auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  WF_USER_CHECK(error == std::errc() && stop == text.data() + text.size() && value <= max,
                "checkpoint '{}': its state '{}' is '{}', not an integer from 0 to {}; {}", checkpoint.dir, key, text,
                max, detail::corrupt_fix(checkpoint.dir));
  return value;
}

void check_model_fits(const Checkpoint& checkpoint, const nn::Module& model) {
  // The checkpoint holds whole tensors: a split parameter is compared by its unpadded whole shape.
  std::map<std::string, Shape, std::less<>> whole_shapes;
  for (const auto& [name, shard] : model.named_parameter_shards()) whole_shapes.emplace(name, shard.unpadded_shape());
  const nn::StateDict own = model.state_dict();
  std::vector<std::string> problems;
  for (const auto& [name, tensor] : own) {
    const Tensor* found = checkpoint.model.find(name);
    const auto whole = whole_shapes.find(name);
    const Shape& shape = whole == whole_shapes.end() ? tensor.shape() : whole->second;
    if (found == nullptr) {
      problems.push_back(fmt::format("tensor '{}' is missing", name));
    } else if (found->shape() != shape) {
      problems.push_back(fmt::format("tensor '{}' has shape {} in the file but {} in the model", name,
                                     shape_str(found->shape()), shape_str(shape)));
    } else if (found->dtype() != tensor.dtype()) {
      problems.push_back(fmt::format("tensor '{}' has dtype {} in the file but {} in the model", name,
                                     dtype_name(found->dtype()), dtype_name(tensor.dtype())));
    }
  }
  for (const auto& [name, tensor] : checkpoint.model) {
    if (!own.contains(name)) problems.push_back(fmt::format("tensor '{}' is in the file but not in the model", name));
  }
  // Another model altogether differs in every tensor: the first few say enough.
  constexpr std::size_t kShown = 8;
  const std::size_t hidden = problems.size() > kShown ? problems.size() - kShown : 0;
  problems.resize(problems.size() - hidden);
  if (hidden > 0) problems.push_back(fmt::format("and {} more", hidden));
  WF_USER_CHECK(problems.empty(),
                "checkpoint '{}': its model state does not fit the model: {}; the checkpoint was written for another "
                "model (the config_yaml of its manifest says which) or by another build of wallfacer",
                checkpoint.dir, fmt::join(problems, "; "));
}

std::vector<std::string> CheckpointStore::list() const {
  std::vector<std::string> out;
  for (const auto& [step, path] : detail::step_dirs(fs::path(dir_), /*with_manifest=*/true)) out.push_back(path.string());
  return out;
}

}  // namespace wf::train
