// Reading checkpoints of format 3 or 4 piece by piece, into any layout (distributed_checkpoint.h).
#include <fmt/format.h>

#include <map>
#include <algorithm>
#include <cstring>
#include <utility>

#include "src/train/checkpoint_files.h"
#include "src/train/piece_runs.h"
#include "wallfacer/core/error.h"
#include "wallfacer/train/distributed_checkpoint.h"
#include "wallfacer/train/optimizer.h"
#include "wallfacer/train/safetensors.h"

namespace wf::train {
namespace {

using detail::Json;
namespace fs = std::filesystem;

detail::PieceLayout layout_of(const CheckpointReader::TensorInfo& info, const CheckpointReader::StoredPiece& piece) {
  return {info.shape, piece.dim, piece.start, piece.length, piece.flat_begin, piece.flat_end};
}

std::int64_t json_int(const Json& object, const char* key, const std::string& what) {
  WF_CHECK(object.is_object() && object.contains(key) && object[key].is_number_integer(),
           "{}: field '{}' is missing or not an integer", what, key);
  return object[key].get<std::int64_t>();
}

// The "tensors" index of a version 4 manifest; every tensor's pieces must tile it.
std::vector<CheckpointReader::TensorInfo> parse_index(const Json& manifest, const std::string& dir,
                                                      const std::map<std::string, std::uint64_t>& files) {
  const std::string path = (fs::path(dir) / detail::kManifest).string();
  const Json& tensors = detail::field(manifest, "tensors", &Json::is_object, "an object", path, dir);
  std::vector<CheckpointReader::TensorInfo> out;
  for (const auto& [key, entry] : tensors.items()) {
    const std::string what = fmt::format("checkpoint manifest '{}': tensor '{}'", path, key);
    try {
      CheckpointReader::TensorInfo info;
      info.key = key;
      info.dtype = parse_dtype(detail::field(entry, "dtype", &Json::is_string, "a string", path, dir).get<std::string>());
      for (const Json& extent : detail::field(entry, "shape", &Json::is_array, "an array", path, dir)) {
        WF_CHECK(extent.is_number_integer(), "{}: the shape holds a non-integer", what);
        info.shape.push_back(extent.get<std::int64_t>());
      }
      std::vector<detail::PieceLayout> layouts;
      for (const Json& p : detail::field(entry, "pieces", &Json::is_array, "an array", path, dir)) {
        CheckpointReader::StoredPiece piece;
        piece.file = detail::field(p, "file", &Json::is_string, "a string", path, dir).get<std::string>();
        WF_CHECK(files.contains(piece.file), "{}: a piece is in '{}', which the manifest's files do not list", what,
                 piece.file);
        // The file's name for the piece: the key, unless the rank held several pieces of it.
        piece.entry = p.contains("entry") ? detail::field(p, "entry", &Json::is_string, "a string", path, dir).get<std::string>()
                                          : key;
        piece.dim = static_cast<int>(json_int(p, "dim", what));
        piece.start = json_int(p, "start", what);
        piece.length = json_int(p, "length", what);
        piece.flat_begin = json_int(p, "flat_begin", what);
        piece.flat_end = json_int(p, "flat_end", what);
        layouts.push_back(layout_of(info, piece));
        detail::check_layout(layouts.back(), what);
        info.pieces.push_back(std::move(piece));
      }
      const std::string problem = detail::tiling_problem(info.shape, layouts);
      WF_CHECK(problem.empty(), "{} of shape {}: {}", what, shape_str(info.shape), problem);
      out.push_back(std::move(info));
    } catch (const Error& e) {
      WF_FAIL("{}; {}", e.what(), detail::corrupt_fix(dir));
    }
  }
  return out;
}

}  // namespace

bool is_optimizer_key(std::string_view key) {
  for (const std::string_view field : kAdamWStateFields) {
    if (key.size() > field.size() + 1 && key.ends_with(field) && key[key.size() - field.size() - 1] == '.') return true;
  }
  return false;
}

struct CheckpointReader::OpenFile {
  explicit OpenFile(const std::string& path) : reader(path) {}
  SafetensorsReader reader;
};

CheckpointReader::CheckpointReader(std::string checkpoint_dir) : dir_(std::move(checkpoint_dir)) {
  const Json manifest = detail::read_manifest(dir_);
  const std::string path = (fs::path(dir_) / detail::kManifest).string();
  version_ = manifest["version"].get<std::int64_t>();
  step_ = manifest["step"].get<std::int64_t>();
  config_yaml_ = detail::manifest_config(manifest, dir_);
  state_ = detail::manifest_state(manifest, dir_);
  for (auto& [name, record] : detail::manifest_files(manifest, dir_)) {
    // Present and of its size now (a missing rank file is named before anything is read); the
    // checksum when the file is first read.
    detail::check_file(dir_, name, record.bytes, "");
    file_bytes_[name] = record.bytes;
    file_sha256_[name] = record.sha256;
  }
  if (version_ == detail::kShardedVersion) {
    world_size_ = static_cast<int>(
        detail::field(manifest, "world_size", &Json::is_number_unsigned, "a rank count", path, dir_).get<std::int64_t>());
    tensors_ = parse_index(manifest, dir_, file_bytes_);
  } else {
    read_whole_tensor_index();
  }
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    WF_CHECK(index_.emplace(tensors_[i].key, i).second, "checkpoint '{}' holds tensor '{}' twice; {}", dir_,
             tensors_[i].key, detail::corrupt_fix(dir_));
  }
}

void CheckpointReader::read_whole_tensor_index() {
  const std::string path = (fs::path(dir_) / detail::kManifest).string();
  // Version 3: whole tensors in two files, whose headers are the index.
  for (const char* file : {detail::kModelFile, detail::kOptimizerFile}) {
    WF_CHECK(file_bytes_.contains(file), "checkpoint manifest '{}' lists no file '{}'; {}", path, file,
             detail::corrupt_fix(dir_));
    for (const SafetensorsEntry& entry : open(file).reader.entries()) {
      TensorInfo info{entry.name, entry.dtype, entry.shape, {}};
      info.pieces.push_back({file, entry.name, -1, 0, 0, 0, shape_numel(entry.shape)});
      tensors_.push_back(std::move(info));
    }
  }
}

CheckpointReader::~CheckpointReader() = default;

const CheckpointReader::TensorInfo* CheckpointReader::find(std::string_view key) const {
  const auto it = index_.find(key);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

CheckpointReader::OpenFile& CheckpointReader::open(const std::string& file) {
  auto it = open_.find(file);
  if (it != open_.end()) return *it->second;
  // Verified before its header is parsed: nothing of a damaged file is used.
  detail::check_file(dir_, file, file_bytes_.at(file), file_sha256_.at(file));
  auto opened = std::make_unique<OpenFile>((fs::path(dir_) / file).string());
  return *open_.emplace(file, std::move(opened)).first->second;
}

void CheckpointReader::verify_all_files() {
  for (const auto& [file, bytes] : file_bytes_) open(file);
}

Checkpoint CheckpointReader::header() const {
  Checkpoint checkpoint;
  checkpoint.dir = dir_;
  checkpoint.step = step_;
  checkpoint.config_yaml = config_yaml_;
  checkpoint.state = state_;
  return checkpoint;
}

void CheckpointReader::load(ShardedStateDict& targets) {
  // What to copy from where, for every target, before any byte is read: a checkpoint that does
  // not fit is refused without touching the targets.
  struct Transfer {
    const TensorInfo* info;
    const StoredPiece* piece;
    detail::Copy copy;
    ShardedTensor* target;
  };
  std::vector<Transfer> transfers;
  std::vector<ShardedTensor*> padded;  // targets with elements no stored piece holds (padding rows)
  for (ShardedTensor& target : targets) {
    const TensorInfo* info = find(target.key);
    WF_USER_CHECK(info != nullptr, "checkpoint '{}' holds no tensor '{}': it was written for another model",
                  dir_, target.key);
    const Shape shape = target.shard.unpadded_shape();
    WF_USER_CHECK(info->shape == shape && info->dtype == target.data.dtype(),
                  "checkpoint '{}': tensor '{}' is {} {} in the checkpoint but {} {} here: it was written for another "
                  "model",
                  dir_, target.key, dtype_name(info->dtype), shape_str(info->shape), dtype_name(target.data.dtype()),
                  shape_str(shape));
    const detail::PieceLayout wanted = detail::PieceLayout::of(target.shard, target.flat_begin, target.flat_end);
    detail::check_layout(wanted, fmt::format("checkpoint load: target '{}'", target.key));
    WF_CHECK(target.data.numel() == target.numel(), "checkpoint load: target '{}' holds {} elements for a piece of {}",
             target.key, target.data.numel(), target.numel());
    const std::vector<detail::Run> runs = detail::piece_runs(wanted);
    std::int64_t covered = 0;
    for (const StoredPiece& piece : info->pieces) {
      for (const detail::Copy& copy : detail::intersect_runs(detail::piece_runs(layout_of(*info, piece)), runs)) {
        transfers.push_back({info, &piece, copy, &target});
        covered += copy.count;
      }
    }
    // The stored pieces tile the tensor (checked when the index was read), so this only fails for
    // an index that lies.
    WF_USER_CHECK(covered == detail::run_elements(runs),
                  "checkpoint '{}': tensor '{}' is not fully stored: {} of the {} elements of this rank's piece ({}); {}",
                  dir_, target.key, covered, detail::run_elements(runs), detail::layout_str(wanted),
                  detail::corrupt_fix(dir_));
    if (covered < target.numel()) padded.push_back(&target);
  }
  // Files are read on the host: a target on a device is read into a host copy of its shape, which
  // goes to the device once it is complete (one copy per tensor, not one per stored piece).
  std::map<ShardedTensor*, Tensor> staged;
  const auto host_of = [&](ShardedTensor* target) -> Tensor& {
    if (target->data.device().is_cpu()) return target->data;
    auto [it, fresh] = staged.try_emplace(target);
    if (fresh) it->second = Tensor::empty(target->data.shape(), target->data.dtype());
    return it->second;
  };
  for (ShardedTensor* target : padded) {
    Tensor& host = host_of(target);
    std::memset(host.raw_data(), 0, host.nbytes());
  }
  for (const Transfer& t : transfers) {
    const SafetensorsReader& reader = open(t.piece->file).reader;
    const SafetensorsEntry* entry = reader.find(t.piece->entry);
    const std::size_t element = dtype_size(t.info->dtype);
    WF_USER_CHECK(entry != nullptr && entry->dtype == t.info->dtype &&
                      entry->bytes == static_cast<std::uint64_t>(t.piece->flat_end - t.piece->flat_begin) * element,
                  "checkpoint '{}': file '{}' does not hold tensor '{}' as its manifest records ({} elements of {}); {}",
                  dir_, t.piece->file, t.piece->entry, t.piece->flat_end - t.piece->flat_begin,
                  dtype_name(t.info->dtype), detail::corrupt_fix(dir_));
    auto* out = static_cast<unsigned char*>(host_of(t.target).raw_data()) + t.copy.dst * static_cast<std::int64_t>(element);
    reader.read(*entry, static_cast<std::uint64_t>(t.copy.src) * element,
                static_cast<std::uint64_t>(t.copy.count) * element, out);
  }
  for (auto& [target, host] : staged) target->data.copy_(host);
}

Tensor CheckpointReader::load_whole(const std::string& key) {
  const TensorInfo* info = find(key);
  WF_USER_CHECK(info != nullptr, "checkpoint '{}' holds no tensor '{}'", dir_, key);
  ShardedStateDict whole(1);
  whole[0].key = key;
  whole[0].shard = nn::ParameterShard::replicated(info->shape);
  whole[0].flat_end = shape_numel(info->shape);
  whole[0].data = Tensor::empty(info->shape, info->dtype);
  load(whole);
  return whole[0].data;
}

std::size_t export_checkpoint(const std::string& checkpoint_dir, const std::string& out, bool optimizer) {
  CheckpointReader reader(checkpoint_dir);
  // By key: the same file whatever order the writing ranks listed their pieces in.
  std::vector<std::string> keys;
  for (const CheckpointReader::TensorInfo& t : reader.tensors()) {
    if (optimizer || !is_optimizer_key(t.key)) keys.push_back(t.key);
  }
  std::sort(keys.begin(), keys.end());
  nn::StateDict tensors;
  for (const std::string& key : keys) tensors.insert(key, reader.load_whole(key));
  save_safetensors(out, tensors, {{"format", "pt"}});
  return keys.size();
}

}  // namespace wf::train
