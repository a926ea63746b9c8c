// The checkpoint directory's conventions (checkpoint_files.h).
#include "src/train/checkpoint_files.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "src/core/atomic_file.h"
#include "src/train/json_limits.h"
#include "src/train/safetensors_encode.h"
#include "src/train/sha256.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"

namespace wf::train::detail {
namespace {

// The SHA-256 of `manifest` without its checksum field, as compact JSON in the manifest's own key
// order: what the writer hashes before adding the field, and what a reader recomputes from the
// parsed file, so that layout (indentation) is free but any changed value or key is caught.
std::string manifest_digest(Json manifest) {
  manifest.erase(kManifestChecksum);
  return sha256_hex(manifest.dump());
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

}  // namespace

std::string step_name(std::int64_t step) {
  WF_CHECK(step >= 0, "checkpoint step {} is negative; a run counts its steps from 0", step);
  return fmt::format("{}{:08d}", kStepPrefix, step);
}

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

std::string dir_name(const std::string& checkpoint_dir) {
  std::error_code ec;
  fs::path path = fs::absolute(checkpoint_dir, ec).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();
  return path.filename().string();
}

std::string corrupt_fix(const std::string& checkpoint_dir) {
  return fmt::format("the checkpoint is corrupt; delete {} to resume from the previous one", checkpoint_dir);
}

Json manifest_head(std::int64_t version, std::int64_t step, const std::string& config_yaml,
                   const std::map<std::string, std::string>& state) {
  Json manifest = Json::object();
  manifest["format"] = kFormat;
  manifest["version"] = version;
  manifest["step"] = step;
  manifest["config_yaml"] = config_yaml;
  Json values = Json::object();
  for (const auto& [key, value] : state) values[key] = value;
  manifest["state"] = std::move(values);
  return manifest;
}

std::string manifest_config(const Json& manifest, const std::string& checkpoint_dir) {
  const std::string path = (fs::path(checkpoint_dir) / kManifest).string();
  return field(manifest, "config_yaml", &Json::is_string, "a string", path, checkpoint_dir).get<std::string>();
}

std::map<std::string, std::string> manifest_state(const Json& manifest, const std::string& checkpoint_dir) {
  const std::string path = (fs::path(checkpoint_dir) / kManifest).string();
  std::map<std::string, std::string> state;
  for (const auto& [key, value] : field(manifest, "state", &Json::is_object, "an object", path, checkpoint_dir).items()) {
    WF_CHECK(value.is_string(), "checkpoint manifest '{}': state value '{}' is not a string; {}", path, key,
             corrupt_fix(checkpoint_dir));
    state[key] = value.get<std::string>();
  }
  return state;
}

WrittenFile write_hashed_safetensors(const fs::path& dir, const std::string& name, const nn::StateDict& tensors) {
  const std::string path = (dir / name).string();
  const SafetensorsImage image = encode_safetensors(tensors, {{"format", "pt"}}, path);
  const auto pieces = image.pieces();
  Sha256 hash;
  for (const auto& piece : pieces) hash.update(piece.data, piece.size);
  wf::detail::write_file_atomically(path, pieces, "checkpoint");
  return {name, image.size(), hash.hex_digest()};
}

const Json& field(const Json& object, const char* key, bool (Json::*is_type)() const noexcept, const char* type,
                  const std::string& manifest, const std::string& checkpoint_dir) {
  WF_CHECK(object.is_object() && object.contains(key) && (object[key].*is_type)(),
           "checkpoint manifest '{}': field '{}' is missing or not {}; {}", manifest, key, type,
           corrupt_fix(checkpoint_dir));
  return object[key];
}

std::string sealed_manifest_text(Json manifest, const std::string& path) {
  try {
    manifest[kManifestChecksum] = manifest_digest(manifest);
    return manifest.dump(2) + "\n";
  } catch (const Json::exception& e) {
    WF_FAIL("cannot write checkpoint manifest '{}': the config and state values must be valid UTF-8 text (encode "
            "binary state, e.g. as hex) ({})",
            path, e.what());
  }
}

Json read_manifest(const std::string& checkpoint_dir) {
  const std::string manifest = (fs::path(checkpoint_dir) / kManifest).string();
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
    json = parse_bounded_json(text.str(), fmt::format("checkpoint manifest '{}'", manifest));
  } catch (const Json::exception& e) {
    WF_FAIL("checkpoint manifest '{}' is not valid JSON ({}); {}", manifest, e.what(), corrupt_fix(checkpoint_dir));
  }
  const auto format = field(json, "format", &Json::is_string, "a string", manifest, checkpoint_dir).get<std::string>();
  WF_CHECK(format == kFormat, "'{}' is not a wallfacer checkpoint manifest (format '{}', expected '{}')", manifest,
           format, kFormat);
  const auto version =
      field(json, "version", &Json::is_number_integer, "an integer", manifest, checkpoint_dir).get<std::int64_t>();
  WF_CHECK(version == kWholeTensorVersion || version == kShardedVersion,
           "checkpoint manifest '{}' has format version {}; this build of wallfacer reads versions {} and {} (use the "
           "wallfacer that wrote it)",
           manifest, version, kWholeTensorVersion, kShardedVersion);
  const auto recorded =
      field(json, kManifestChecksum, &Json::is_string, "a string", manifest, checkpoint_dir).get<std::string>();
  const std::string actual = manifest_digest(json);
  WF_CHECK(recorded == actual,
           "checkpoint manifest '{}' fails its checksum: {} records {}, its content hashes to {}; it was edited or "
           "damaged after it was written, so nothing in it can be trusted; {}",
           manifest, kManifestChecksum, recorded, actual, corrupt_fix(checkpoint_dir));
  // The store orders and prunes checkpoints by their directory's name: a renamed directory would
  // be resumed as another step than the one it holds.
  const auto step =
      field(json, "step", &Json::is_number_integer, "an integer", manifest, checkpoint_dir).get<std::int64_t>();
  // No save writes a negative step (a run counts them from 0), and no directory name could match one.
  WF_CHECK(step >= 0, "checkpoint manifest '{}' records step {}, but steps count from 0, so no save wrote it; {}",
           manifest, step, corrupt_fix(checkpoint_dir));
  const std::string name = dir_name(checkpoint_dir);
  WF_CHECK(parse_step_name(name) == step,
           "checkpoint '{}': its manifest records step {} but the directory is named '{}'; a checkpoint's directory "
           "is named after its step: rename it to {} (or delete it)",
           checkpoint_dir, step, name, step_name(step));
  return json;
}

std::map<std::string, FileRecord> manifest_files(const Json& manifest, const std::string& checkpoint_dir) {
  const std::string path = (fs::path(checkpoint_dir) / kManifest).string();
  std::map<std::string, FileRecord> files;
  for (const auto& [name, info] : field(manifest, "files", &Json::is_object, "an object", path, checkpoint_dir).items()) {
    // A file name is a plain name inside the checkpoint directory, never a path out of it.
    WF_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
             "checkpoint manifest '{}': file name '{}' is not a plain file name; {}", path, name,
             corrupt_fix(checkpoint_dir));
    FileRecord record;
    record.bytes = field(info, "bytes", &Json::is_number_unsigned, "a byte count", path, checkpoint_dir).get<std::uint64_t>();
    record.sha256 = field(info, "sha256", &Json::is_string, "a string", path, checkpoint_dir).get<std::string>();
    files.emplace(name, std::move(record));
  }
  return files;
}

void check_file(const std::string& checkpoint_dir, const std::string& name, std::uint64_t expected_bytes,
                const std::string& expected_sha) {
  const std::string path = (fs::path(checkpoint_dir) / name).string();
  std::error_code ec;
  const std::uintmax_t bytes = fs::file_size(path, ec);
  WF_CHECK(!ec, "checkpoint file '{}' is missing or unreadable ({}); {}", path, ec.message(),
           corrupt_fix(checkpoint_dir));
  WF_CHECK(bytes == expected_bytes, "checkpoint file '{}' is {} bytes but its manifest records {} (truncated?); {}",
           path, bytes, expected_bytes, corrupt_fix(checkpoint_dir));
  if (expected_sha.empty()) return;
  const std::string actual_sha = sha256_file_hex(path);
  WF_CHECK(actual_sha == expected_sha, "checkpoint file '{}' fails its checksum: expected SHA-256 {}, actual {}; {}",
           path, expected_sha, actual_sha, corrupt_fix(checkpoint_dir));
}

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

void remove_tmp_leftovers(const fs::path& store) {
  std::error_code ec;
  fs::create_directories(store, ec);
  WF_CHECK(!ec, "cannot save checkpoint: cannot create the directory '{}': {}", store.string(), ec.message());
  // Collected first, as deleting while iterating a directory is unspecified.
  std::vector<fs::path> leftovers;
  for (const auto& entry : fs::directory_iterator(store, ec)) {
    if (entry.path().filename().string().rfind(kTmpPrefix, 0) == 0) leftovers.push_back(entry.path());
  }
  for (const fs::path& leftover : leftovers) fs::remove_all(leftover, ec);
}

fs::path make_tmp_dir(const fs::path& store, std::int64_t step) {
  const fs::path tmp_dir = store / fmt::format("{}{}-{}", kTmpPrefix, step_name(step), ::getpid());
  std::error_code ec;
  fs::create_directory(tmp_dir, ec);
  WF_CHECK(!ec, "cannot save checkpoint: cannot create the directory '{}': {}", tmp_dir.string(), ec.message());
  return tmp_dir;
}

fs::path commit_checkpoint_dir(const fs::path& store, const fs::path& tmp_dir, std::int64_t step) {
  const std::string name = step_name(step);
  const fs::path final_dir = store / name;
  // A same-step checkpoint is first moved aside (rename cannot replace a non-empty directory),
  // and moved back when the second rename fails.
  std::error_code ec;
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
  wf::detail::fsync_directory(store.string());
  if (!replaced.empty()) fs::remove_all(replaced, ec);
  return final_dir;
}

void prune_checkpoints(const fs::path& store, const fs::path& kept, std::int64_t keep) {
  if (keep <= 0) return;
  auto existing = step_dirs(store, /*with_manifest=*/false);
  // Oldest first; the checkpoint just written stays even when older-numbered than the others.
  std::erase_if(existing, [&](const auto& entry) { return entry.second == kept; });
  const auto excess = static_cast<std::int64_t>(existing.size()) + 1 - keep;
  for (std::int64_t i = 0; i < excess; ++i) remove_checkpoint_dir(existing[static_cast<std::size_t>(i)].second, store);
  if (excess > 0) wf::detail::fsync_directory(store.string());
}

}  // namespace wf::train::detail
