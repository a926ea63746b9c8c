// The collective save of a version 4 checkpoint (distributed_checkpoint.h).
//
// Protocol, every step agreed by all ranks (agree() below), so that a failure anywhere fails the
// save everywhere with one message and no rank is left waiting in a collective:
//   1. the ranks check that they name one checkpoint directory; rank 0 removes leftovers of
//      interrupted saves, creates .tmp-step-<step>-<pid>/ and broadcasts its name;
//   2. every rank writes rank-<r>.safetensors into it (synced), hashing it on the way;
//   3. the ranks all-gather their file's index (name, size, SHA-256, pieces) as JSON text;
//   4. rank 0 checks that the pieces tile every tensor, writes manifest.json (synced), renames
//      the directory to step-<step> (the moment it becomes visible) and prunes.
// Until the rename nothing is visible under a step-* name, so a kill at any moment leaves the
// previous checkpoint the newest complete one; step_dirs() ignores .tmp-* directories and the
// next save removes them.
#include <signal.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string_view>

#include "src/core/atomic_file.h"
#include "src/train/checkpoint_files.h"
#include "src/train/piece_runs.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"
#include "wallfacer/train/distributed_checkpoint.h"

namespace wf::train {
namespace {

using detail::Json;
namespace fs = std::filesystem;

std::string rank_file_name(int rank) { return fmt::format("rank-{:05d}.safetensors", rank); }

// The test-only crash hook (distributed_checkpoint.h): rank 0 dies at `point` when asked to.
void crash_point(const comm::Group& world, std::string_view point) {
  const char* wanted = std::getenv("WF_TEST_CRASH_IN_SAVE");
  if (world.rank() == 0 && wanted != nullptr && point == wanted) {
    log::warn("WF_TEST_CRASH_IN_SAVE={}: killing rank 0 in the middle of a checkpoint save", point);
    ::raise(SIGKILL);
  }
}

// `text` of rank `root`, on every rank.
std::string broadcast_text(comm::Group& world, const std::string& text, int root) {
  Tensor length = Tensor::from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(text.size())}, {1});
  world.broadcast(length, root);
  Tensor bytes = Tensor::zeros({length.data<std::int64_t>()[0]}, DType::u8);
  if (world.rank() == root && !text.empty()) std::memcpy(bytes.raw_data(), text.data(), text.size());
  if (bytes.numel() > 0) world.broadcast(bytes, root);
  return {static_cast<const char*>(bytes.raw_data()), static_cast<std::size_t>(bytes.numel())};
}

// Every rank's `text`, in rank order, on every rank.
std::vector<std::string> all_gather_text(comm::Group& world, const std::string& text) {
  Tensor length = Tensor::from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(text.size())}, {1});
  const Tensor lengths = world.all_gather(length);
  std::vector<std::int64_t> rows(lengths.data<std::int64_t>(), lengths.data<std::int64_t>() + world.size());
  Tensor mine = Tensor::zeros({static_cast<std::int64_t>(text.size())}, DType::u8);
  if (!text.empty()) std::memcpy(mine.raw_data(), text.data(), text.size());
  std::int64_t total = 0;
  for (const std::int64_t n : rows) total += n;
  Tensor all = Tensor::zeros({total}, DType::u8);
  world.all_gather_v(mine, all, rows);
  std::vector<std::string> out;
  const char* at = static_cast<const char*>(all.raw_data());
  for (const std::int64_t n : rows) {
    out.emplace_back(at, static_cast<std::size_t>(n));
    at += n;
  }
  return out;
}

// Runs `body` on every rank, then fails on every rank alike when it threw on any: with the
// message of the lowest failing rank, prefixed by that rank.
void agree(comm::Group& world, const std::function<void()>& body) {
  std::string error;
  try {
    body();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "unknown error";
  }
  Tensor first = Tensor::from_vector(std::vector<double>{static_cast<double>(error.empty() ? world.size() : world.rank())}, {1});
  world.all_reduce(first, comm::ReduceOp::min);
  const int root = static_cast<int>(first.data<double>()[0]);
  if (root == world.size()) return;
  const std::string message = broadcast_text(world, error, root);
  WF_FAIL("rank {}: {}", root, message);
}

// This rank's file and its index entry: {"file", "bytes", "sha256", "pieces": [...]}.
Json write_rank_file(const fs::path& dir, const std::string& name, const ShardedStateDict& pieces) {
  nn::StateDict tensors;
  Json index = Json::array();
  for (const ShardedTensor& piece : pieces) {
    if (!piece.writer) continue;
    const std::string what = fmt::format("cannot save checkpoint piece '{}'", piece.key);
    // A rank may hold several pieces of one tensor (ZeRO-2 cuts a parameter over buckets, and a
    // replica owns a chunk of each): the file names each after its first element.
    const std::string entry = tensors.contains(piece.key) ? fmt::format("{}@{}", piece.key, piece.flat_begin) : piece.key;
    WF_CHECK(!tensors.contains(entry), "{}: this rank holds the piece starting at element {} twice", what,
             piece.flat_begin);
    WF_CHECK(piece.data.numel() == piece.numel(), "{}: its data holds {} elements, its range [{}, {}) {}", what,
             piece.data.numel(), piece.flat_begin, piece.flat_end, piece.numel());
    const detail::PieceLayout layout = detail::PieceLayout::of(piece.shard, piece.flat_begin, piece.flat_end);
    detail::check_layout(layout, what);
    tensors.insert(entry, piece.data.device().is_cpu() ? piece.data : piece.data.to(Device::cpu()));
    index.push_back({{"key", piece.key},
                     {"entry", entry},
                     {"dtype", dtype_name(piece.data.dtype())},
                     {"shape", layout.global_shape},
                     {"dim", layout.dim},
                     {"start", layout.start},
                     {"length", layout.length},
                     {"flat_begin", layout.flat_begin},
                     {"flat_end", layout.flat_end}});
  }
  const detail::WrittenFile file = detail::write_hashed_safetensors(dir, name, tensors);
  return {{"file", file.name}, {"bytes", file.bytes}, {"sha256", file.sha256}, {"pieces", std::move(index)}};
}

// The manifest's "files" and "tensors" from every rank's index, checked: one dtype and shape per
// key, and pieces that hold every element of it exactly once.
std::pair<Json, Json> merge_indexes(const std::vector<std::string>& texts) {
  Json files = Json::object(), tensors = Json::object();
  std::map<std::string, std::vector<detail::PieceLayout>> layouts;
  for (std::size_t rank = 0; rank < texts.size(); ++rank) {
    const Json index = Json::parse(texts[rank]);
    const std::string file = index["file"].get<std::string>();
    files[file] = {{"bytes", index["bytes"]}, {"sha256", index["sha256"]}};
    for (const Json& piece : index["pieces"]) {
      const std::string key = piece["key"].get<std::string>();
      if (!tensors.contains(key)) {
        tensors[key] = {{"dtype", piece["dtype"]}, {"shape", piece["shape"]}, {"pieces", Json::array()}};
      }
      Json& tensor = tensors[key];
      WF_CHECK(tensor["dtype"] == piece["dtype"] && tensor["shape"] == piece["shape"],
               "cannot save checkpoint: tensor '{}' is {} {} on one rank but {} {} on rank {}", key,
               tensor["dtype"].dump(), tensor["shape"].dump(), piece["dtype"].dump(), piece["shape"].dump(), rank);
      tensor["pieces"].push_back({{"file", file},
                                  {"entry", piece["entry"]},
                                  {"dim", piece["dim"]},
                                  {"start", piece["start"]},
                                  {"length", piece["length"]},
                                  {"flat_begin", piece["flat_begin"]},
                                  {"flat_end", piece["flat_end"]}});
      layouts[key].push_back({piece["shape"].get<Shape>(), piece["dim"].get<int>(), piece["start"].get<std::int64_t>(),
                              piece["length"].get<std::int64_t>(), piece["flat_begin"].get<std::int64_t>(),
                              piece["flat_end"].get<std::int64_t>()});
    }
  }
  for (const auto& [key, pieces] : layouts) {
    const std::string problem = detail::tiling_problem(pieces.front().global_shape, pieces);
    WF_CHECK(problem.empty(),
             "cannot save checkpoint: the ranks' pieces of tensor '{}' do not hold it exactly once: {}; exactly one "
             "replica of every piece must be its writer (ShardedTensor::writer)",
             key, problem);
  }
  return {std::move(files), std::move(tensors)};
}

}  // namespace

std::string save_sharded_checkpoint(const CheckpointStore& store, std::int64_t step, const ShardedStateDict& pieces,
                                    const std::map<std::string, std::string>& state, const std::string& config_yaml,
                                    comm::Group& world) {
  const fs::path root(store.dir());
  const bool lead = world.rank() == 0;
  // Every rank writes into the directory rank 0 creates: they must name the same one.
  const std::string lead_dir = broadcast_text(world, store.dir(), 0);
  agree(world, [&] {
    WF_CHECK(lead_dir == store.dir(),
             "cannot save checkpoint: this rank's checkpoint directory is '{}' but rank 0's is '{}'; every rank must "
             "save into the same checkpoint.dir (on a filesystem all of them see)",
             store.dir(), lead_dir);
  });
  std::string tmp_name;
  agree(world, [&] {
    if (!lead) return;
    WF_CHECK(step >= 0, "checkpoint store: cannot save step {}: steps are non-negative", step);
    detail::remove_tmp_leftovers(root);
    tmp_name = detail::make_tmp_dir(root, step).filename().string();
  });
  const fs::path tmp_dir = root / broadcast_text(world, tmp_name, 0);
  fs::path final_dir;
  try {
    std::string index;
    agree(world, [&] { index = write_rank_file(tmp_dir, rank_file_name(world.rank()), pieces).dump(); });
    crash_point(world, "after_rank_files");
    const std::vector<std::string> indexes = all_gather_text(world, index);
    agree(world, [&] {
      if (!lead) return;
      auto [files, tensors] = merge_indexes(indexes);
      Json manifest = detail::manifest_head(detail::kShardedVersion, step, config_yaml, state);
      manifest["world_size"] = world.size();
      manifest["files"] = std::move(files);
      manifest["tensors"] = std::move(tensors);
      const std::string path = (tmp_dir / detail::kManifest).string();
      const std::string text = detail::sealed_manifest_text(std::move(manifest), path);
      wf::detail::write_file_atomically(path, {{text.data(), text.size()}}, "checkpoint");
      crash_point(world, "after_manifest");
      final_dir = detail::commit_checkpoint_dir(root, tmp_dir, step);
      crash_point(world, "after_rename");
    });
  } catch (...) {
    if (lead) {
      std::error_code ignored;
      fs::remove_all(tmp_dir, ignored);
    }
    throw;
  }
  if (lead) detail::prune_checkpoints(root, final_dir, store.keep());
  return (root / detail::step_name(step)).string();
}

}  // namespace wf::train
