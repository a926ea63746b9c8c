#include "wallfacer/train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fmt/ranges.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "src/core/atomic_file.h"
#include "src/train/json_limits.h"
#include "src/train/safetensors_encode.h"
#include "src/train/sha256.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"
#include "wallfacer/nn/module.h"
#include "wallfacer/train/safetensors.h"

namespace wf::train {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr const char* kFormat = "wallfacer-checkpoint";
// 2: whole tensors under global names, the optimizer's keyed by parameter name (sharded_state.h),
// and qkv rows grouped per kv head (self_attention.h). 3: the manifest carries the SHA-256 of its
// own content; a version 2 manifest, which has none, could be edited unnoticed and is refused.
constexpr std::int64_t kVersion = 3;
constexpr const char* kManifest = "manifest.json";
// The SHA-256 of the manifest's other fields, kept in the manifest itself (manifest_digest).
constexpr const char* kManifestChecksum = "manifest_sha256";
// A manifest is a config and a few strings: anything near this size is not one, and is refused
// before it is read into memory.
constexpr std::uintmax_t kMaxManifestBytes = 64 << 20;
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStepPrefix = "step-";
constexpr const char* kTmpPrefix = ".tmp-";

std::string step_name(std::int64_t step) { return fmt::format("{}{:08d}", kStepPrefix, step); }

// The step of a directory named step-<digits>, or nullopt for any other name.
std::optional<std::int64_t> parse_step_name(const std::string& name) {
  const std::string_view prefix = kStepPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  if (!std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  std::int64_t step = 0;
  const auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last) return std::nullopt;
  return step;
}

// The SHA-256 of `manifest` without its checksum field, as compact JSON in the manifest's own key
// order: what the writer hashes before adding the field, and what a reader recomputes from the
// parsed file, so that layout (indentation) is free but any changed value or key is caught.
std::string manifest_digest(Json manifest) {
  manifest.erase(kManifestChecksum);
  return detail::sha256_hex(manifest.dump());
}

std::string corrupt_fix(const std::string& checkpoint_dir) {
  return fmt::format("the checkpoint is corrupt; delete {} to resume from the previous one", checkpoint_dir);
}

// Moves `path` out of sight (a .tmp- name, which list() ignores and save() cleans up), then
// deletes it, so a crash half-way through never leaves a partial step-* directory.
void remove_checkpoint_dir(const fs::path& path, const fs::path& store) {
  const fs::path doomed = store / fmt::format("{}removed-{}-{}", kTmpPrefix, path.filename().string(), ::getpid());
  std::error_code ec;
  fs::rename(path, doomed, ec);
  fs::remove_all(ec ? path : doomed, ec);
  if (ec) log::warn("checkpoint store: could not delete '{}': {}", path.string(), ec.message());
}

struct WrittenFile {
  std::string name;
  std::uint64_t bytes;
  std::string sha256;
};

// Writes one safetensors file of the checkpoint, hashing the bytes on their way to disk.
WrittenFile write_part(const fs::path& dir, const char* name, const nn::StateDict& tensors) {
  const std::string path = (dir / name).string();
  const detail::SafetensorsImage image = detail::encode_safetensors(tensors, {{"format", "pt"}}, path);
  const auto pieces = image.pieces();
  detail::Sha256 hash;
  for (const auto& piece : pieces) hash.update(piece.data, piece.size);
  wf::detail::write_file_atomically(path, pieces, "checkpoint");
  return {name, image.size(), hash.hex_digest()};
}

std::string manifest_text(const Checkpoint& checkpoint, const std::vector<WrittenFile>& files, const std::string& path) {
  Json manifest = Json::object();
  manifest["format"] = kFormat;
  manifest["version"] = kVersion;
  manifest["step"] = checkpoint.step;
  manifest["config_yaml"] = checkpoint.config_yaml;
  Json state = Json::object();
  for (const auto& [key, value] : checkpoint.state) state[key] = value;
  manifest["state"] = std::move(state);
  Json file_info = Json::object();
  for (const WrittenFile& file : files) file_info[file.name] = {{"bytes", file.bytes}, {"sha256", file.sha256}};
  manifest["files"] = std::move(file_info);
  try {
    manifest[kManifestChecksum] = manifest_digest(manifest);
    return manifest.dump(2) + "\n";
  } catch (const Json::exception& e) {
    WF_FAIL("cannot write checkpoint manifest '{}': the config and state values must be valid UTF-8 text (encode "
            "binary state, e.g. as hex) ({})",
            path, e.what());
  }
}

// A manifest field, checked: wf::Error naming the manifest, the field and the fix otherwise.
const Json& field(const Json& object, const char* key, bool (Json::*is_type)() const noexcept, const char* type,
                  const std::string& manifest, const std::string& checkpoint_dir) {
  WF_CHECK(object.is_object() && object.contains(key) && (object[key].*is_type)(),
           "checkpoint manifest '{}': field '{}' is missing or not {}; {}", manifest, key, type,
           corrupt_fix(checkpoint_dir));
  return object[key];
}

// The manifest, parsed and verified against its own checksum before any field of it is used.
Json read_manifest(const std::string& manifest, const std::string& checkpoint_dir) {
  std::ifstream in(manifest, std::ios::binary);
  WF_CHECK(in, "checkpoint '{}' is incomplete: cannot read '{}': {}; delete {} to resume from the previous one",
           checkpoint_dir, manifest, wf::detail::errno_text(), checkpoint_dir);
  std::error_code ec;
  const std::uintmax_t bytes = fs::file_size(manifest, ec);
  WF_CHECK(ec || bytes <= kMaxManifestBytes, "checkpoint manifest '{}' is {} bytes, above the limit of {}; {}",
           manifest, bytes, kMaxManifestBytes, corrupt_fix(checkpoint_dir));
  std::stringstream text;
  text << in.rdbuf();
  Json json;
  try {
    json = detail::parse_bounded_json(text.str(), fmt::format("checkpoint manifest '{}'", manifest));
  } catch (const Json::exception& e) {
    WF_FAIL("checkpoint manifest '{}' is not valid JSON ({}); {}", manifest, e.what(), corrupt_fix(checkpoint_dir));
  }
  const auto format = field(json, "format", &Json::is_string, "a string", manifest, checkpoint_dir).get<std::string>();
  WF_CHECK(format == kFormat, "'{}' is not a wallfacer checkpoint manifest (format '{}', expected '{}')", manifest,
           format, kFormat);
  const auto version =
      field(json, "version", &Json::is_number_integer, "an integer", manifest, checkpoint_dir).get<std::int64_t>();
  WF_CHECK(version == kVersion,
           "checkpoint manifest '{}' has format version {}; this build of wallfacer reads version {} (use the "
           "wallfacer that wrote it)",
           manifest, version, kVersion);
  const auto recorded =
      field(json, kManifestChecksum, &Json::is_string, "a string", manifest, checkpoint_dir).get<std::string>();
  const std::string actual = manifest_digest(json);
  WF_CHECK(recorded == actual,
           "checkpoint manifest '{}' fails its checksum: {} records {}, its content hashes to {}; it was edited or "
           "damaged after it was written, so nothing in it can be trusted; {}",
           manifest, kManifestChecksum, recorded, actual, corrupt_fix(checkpoint_dir));
  return json;
}

// The name of `checkpoint_dir` as given ("ckpt/step-00000010/" and "." name their last component).
std::string dir_name(const std::string& checkpoint_dir) {
  std::error_code ec;
  fs::path path = fs::absolute(checkpoint_dir, ec).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();
  return path.filename().string();
}

// Checks one file against the manifest's size and SHA-256 before anything parses it.
void verify_file(const Json& files, const char* name, const std::string& manifest, const std::string& checkpoint_dir) {
  const Json& info = field(files, name, &Json::is_object, "an object", manifest, checkpoint_dir);
  const auto expected_bytes =
      field(info, "bytes", &Json::is_number_unsigned, "a byte count", manifest, checkpoint_dir).get<std::uint64_t>();
  const auto expected_sha =
      field(info, "sha256", &Json::is_string, "a string", manifest, checkpoint_dir).get<std::string>();
  const std::string path = (fs::path(checkpoint_dir) / name).string();
  std::error_code ec;
  const std::uintmax_t bytes = fs::file_size(path, ec);
  WF_CHECK(!ec, "checkpoint file '{}' is missing or unreadable ({}); {}", path, ec.message(),
           corrupt_fix(checkpoint_dir));
  WF_CHECK(bytes == expected_bytes, "checkpoint file '{}' is {} bytes but its manifest records {} (truncated?); {}",
           path, bytes, expected_bytes, corrupt_fix(checkpoint_dir));
  const std::string actual_sha = detail::sha256_file_hex(path);
  WF_CHECK(actual_sha == expected_sha, "checkpoint file '{}' fails its checksum: expected SHA-256 {}, actual {}; {}",
           path, expected_sha, actual_sha, corrupt_fix(checkpoint_dir));
}

// step-* directories of `store` by step, oldest first; with_manifest keeps the complete ones.
std::vector<std::pair<std::int64_t, fs::path>> step_dirs(const fs::path& store, bool with_manifest) {
  std::vector<std::pair<std::int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(store, ec)) return out;
  for (const auto& entry : fs::directory_iterator(store, ec)) {
    const auto step = parse_step_name(entry.path().filename().string());
    if (!step || !entry.is_directory(ec)) continue;
    if (with_manifest && !fs::exists(entry.path() / kManifest, ec)) continue;
    out.emplace_back(*step, entry.path());
  }
  WF_CHECK(!ec, "checkpoint store: cannot list '{}': {}", store.string(), ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

CheckpointStore::CheckpointStore(std::string dir, std::int64_t keep) : dir_(std::move(dir)), keep_(keep) {
  WF_CHECK(!dir_.empty(), "checkpoint store: the directory is empty; name one (e.g. checkpoints/)");
  WF_CHECK(keep_ >= 0, "checkpoint store: keep must be 0 (keep all) or more, not {}", keep_);
}

std::string CheckpointStore::save(const Checkpoint& checkpoint) {
  WF_CHECK(checkpoint.step >= 0, "checkpoint store: cannot save step {}: steps are non-negative", checkpoint.step);
  const fs::path store(dir_);
  std::error_code ec;
  fs::create_directories(store, ec);
  WF_CHECK(!ec, "cannot save checkpoint: cannot create the directory '{}': {}", dir_, ec.message());
  // Leftovers of an interrupted save (this store has one writer, so none is in progress);
  // collected first, as deleting while iterating a directory is unspecified.
  std::vector<fs::path> leftovers;
  for (const auto& entry : fs::directory_iterator(store, ec)) {
    if (entry.path().filename().string().rfind(kTmpPrefix, 0) == 0) leftovers.push_back(entry.path());
  }
  for (const fs::path& leftover : leftovers) fs::remove_all(leftover, ec);

  const std::string name = step_name(checkpoint.step);
  const fs::path final_dir = store / name;
  const fs::path tmp_dir = store / fmt::format("{}{}-{}", kTmpPrefix, name, ::getpid());
  fs::create_directory(tmp_dir, ec);
  WF_CHECK(!ec, "cannot save checkpoint: cannot create the directory '{}': {}", tmp_dir.string(), ec.message());
  try {
    std::vector<WrittenFile> files;
    files.push_back(write_part(tmp_dir, kModelFile, checkpoint.model));
    files.push_back(write_part(tmp_dir, kOptimizerFile, checkpoint.optimizer));
    const std::string manifest_path = (tmp_dir / kManifest).string();
    const std::string manifest = manifest_text(checkpoint, files, manifest_path);
    wf::detail::write_file_atomically(manifest_path, {{manifest.data(), manifest.size()}}, "checkpoint");

    // Into place. A same-step checkpoint is first moved aside (rename cannot replace a non-empty
    // directory), and moved back when the second rename fails.
    fs::path replaced;
    if (fs::exists(final_dir, ec)) {
      replaced = store / fmt::format("{}replaced-{}-{}", kTmpPrefix, name, ::getpid());
      fs::rename(final_dir, replaced, ec);
      WF_CHECK(!ec, "cannot save checkpoint '{}': cannot move the existing one aside: {}", final_dir.string(),
               ec.message());
    }
    fs::rename(tmp_dir, final_dir, ec);
    if (ec) {
      const std::string reason = ec.message();
      if (!replaced.empty()) fs::rename(replaced, final_dir, ec);
      WF_FAIL("cannot save checkpoint '{}': cannot rename '{}' into place: {}", final_dir.string(), tmp_dir.string(),
              reason);
    }
    wf::detail::fsync_directory(dir_);
    if (!replaced.empty()) fs::remove_all(replaced, ec);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp_dir, ignored);
    throw;
  }

  if (keep_ > 0) {
    auto existing = step_dirs(store, /*with_manifest=*/false);
    // Oldest first; the checkpoint just written stays even when older-numbered than the others.
    std::erase_if(existing, [&](const auto& entry) { return entry.second == final_dir; });
    const auto excess = static_cast<std::int64_t>(existing.size()) + 1 - keep_;
    for (std::int64_t i = 0; i < excess; ++i) remove_checkpoint_dir(existing[static_cast<std::size_t>(i)].second, store);
    if (excess > 0) wf::detail::fsync_directory(dir_);
  }
  return final_dir.string();
}

Checkpoint CheckpointStore::load(const std::string& checkpoint_dir) const {
  const std::string manifest_path = (fs::path(checkpoint_dir) / kManifest).string();
  const Json manifest = read_manifest(manifest_path, checkpoint_dir);
  const Json& files = field(manifest, "files", &Json::is_object, "an object", manifest_path, checkpoint_dir);
  for (const char* name : {kModelFile, kOptimizerFile}) verify_file(files, name, manifest_path, checkpoint_dir);

  Checkpoint checkpoint;
  checkpoint.dir = checkpoint_dir;
  checkpoint.step =
      field(manifest, "step", &Json::is_number_integer, "an integer", manifest_path, checkpoint_dir).get<std::int64_t>();
  // The store orders and prunes checkpoints by their directory's name: a renamed directory would
  // be resumed as another step than the one it holds.
  const std::string name = dir_name(checkpoint_dir);
  WF_CHECK(parse_step_name(name) == checkpoint.step,
           "checkpoint '{}': its manifest records step {} but the directory is named '{}'; a checkpoint's directory "
           "is named after its step: rename it to {} (or delete it)",
           checkpoint_dir, checkpoint.step, name, step_name(checkpoint.step));
  checkpoint.config_yaml =
      field(manifest, "config_yaml", &Json::is_string, "a string", manifest_path, checkpoint_dir).get<std::string>();
  for (const auto& [key, value] :
       field(manifest, "state", &Json::is_object, "an object", manifest_path, checkpoint_dir).items()) {
    WF_CHECK(value.is_string(), "checkpoint manifest '{}': state value '{}' is not a string; {}", manifest_path, key,
             corrupt_fix(checkpoint_dir));
    checkpoint.state[key] = value.get<std::string>();
  }
  checkpoint.model = load_safetensors((fs::path(checkpoint_dir) / kModelFile).string()).tensors;
  checkpoint.optimizer = load_safetensors((fs::path(checkpoint_dir) / kOptimizerFile).string()).tensors;
  return checkpoint;
}

std::optional<Checkpoint> CheckpointStore::load_latest(const CheckpointCheck& check,
                                                       std::optional<std::int64_t> at_most) const {
  auto candidates = step_dirs(fs::path(dir_), /*with_manifest=*/false);
  if (at_most) std::erase_if(candidates, [&](const auto& entry) { return entry.first > *at_most; });
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    try {
      Checkpoint checkpoint = load(it->second.string());
      if (check) check(checkpoint);
      return checkpoint;
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

std::optional<std::uint64_t> state_uint(const Checkpoint& checkpoint, const std::string& key, std::uint64_t max) {
  const auto it = checkpoint.state.find(key);
  if (it == checkpoint.state.end()) return std::nullopt;
  const std::string& text = it->second;
  // from_chars into an unsigned type refuses a sign, spaces and values past 2^64 - 1.
  std::uint64_t value = 0;
  const auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  WF_USER_CHECK(error == std::errc() && stop == text.data() + text.size() && value <= max,
                "checkpoint '{}': its state '{}' is '{}', not an integer from 0 to {}; {}", checkpoint.dir, key, text,
                max, corrupt_fix(checkpoint.dir));
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
                "checkpoint '{}': {} does not fit the model: {}; the checkpoint was written for another model (the "
                "config_yaml of its manifest says which) or by another build of wallfacer",
                checkpoint.dir, (fs::path(checkpoint.dir) / kModelFile).string(), fmt::join(problems, "; "));
}

std::vector<std::string> CheckpointStore::list() const {
  std::vector<std::string> out;
  for (const auto& [step, path] : step_dirs(fs::path(dir_), /*with_manifest=*/true)) out.push_back(path.string());
  return out;
}

}  // namespace wf::train
