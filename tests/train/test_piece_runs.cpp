// Pieces of global tensors as runs (src/train/piece_runs.h) against an element-by-element
// reference, and the distributed checkpoint's save and resharding load in a world of one: a
// tensor saved as whole pieces loads into tp slices (padded or not) and flat ranges of them, a
// version 3 checkpoint through the same reader, and what a damaged checkpoint is refused with.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "data/data_testing.h"
#include "src/train/piece_runs.h"  // internal: the mapping under test
#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/error.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/distributed_checkpoint.h"

using Catch::Matchers::Contains;
using wf::Shape;
using wf::Tensor;
using wf::data::testing::TempDir;
using namespace wf::train;
namespace detail = wf::train::detail;

namespace {

// The global offset of each element of the piece (-1: padding), one element at a time.
std::vector<std::int64_t> naive_offsets(const detail::PieceLayout& p) {
  const Shape slice = p.slice_shape();
  std::vector<std::int64_t> out;
  for (std::int64_t e = p.flat_begin; e < p.flat_end; ++e) {
    std::vector<std::int64_t> index(slice.size());
    std::int64_t rest = e;
    for (std::size_t d = slice.size(); d-- > 0;) {
      index[d] = rest % slice[d];
      rest /= slice[d];
    }
    if (p.dim >= 0) index[static_cast<std::size_t>(p.dim)] += p.start;
    std::int64_t global = 0;
    bool padding = false;
    for (std::size_t d = 0; d < slice.size(); ++d) {
      padding = padding || index[d] >= p.global_shape[d];
      global = global * p.global_shape[d] + index[d];
    }
    out.push_back(padding ? -1 : global);
  }
  return out;
}

std::vector<std::int64_t> run_offsets(const detail::PieceLayout& p) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(p.numel()), -1);
  for (const detail::Run& run : detail::piece_runs(p)) {
    for (std::int64_t k = 0; k < run.count; ++k) out[static_cast<std::size_t>(run.piece + k)] = run.global + k;
  }
  return out;
}

// A random tensor-parallel piece: shape of 1 to 3 dims, a split dim (or none), parts, padding of
// the split dim, and a flat range of the slice.
struct RandomPiece {
  wf::nn::ParameterShard shard;
  std::int64_t flat_begin, flat_end;
};
RandomPiece random_piece(std::mt19937& gen) {
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  Shape shape(static_cast<std::size_t>(pick(1, 3)));
  for (auto& extent : shape) extent = pick(1, 5);
  RandomPiece piece;
  if (pick(0, 3) == 0) {
    piece.shard = wf::nn::ParameterShard::replicated(shape);
  } else {
    const int dim = pick(0, static_cast<int>(shape.size()) - 1);
    const int parts = pick(1, 4);
    const int index = pick(0, parts - 1);
    const std::int64_t unpadded = shape[static_cast<std::size_t>(dim)];
    Shape padded = shape;
    padded[static_cast<std::size_t>(dim)] = (unpadded + parts - 1) / parts * parts;  // split evenly
    piece.shard = padded[static_cast<std::size_t>(dim)] == unpadded
                      ? wf::nn::ParameterShard::split("tp", padded, dim, parts, index)
                      : wf::nn::ParameterShard::split_padded("tp", padded, dim, parts, index, unpadded);
  }
  const std::int64_t n = wf::shape_numel(piece.shard.local_shape());
  piece.flat_begin = pick(0, static_cast<int>(n));
  piece.flat_end = pick(static_cast<int>(piece.flat_begin), static_cast<int>(n));
  return piece;
}

// The elements of `whole` a target piece holds (padding: 0), element by element.
std::vector<float> naive_piece(const Tensor& whole, const RandomPiece& piece) {
  const auto layout = detail::PieceLayout::of(piece.shard, piece.flat_begin, piece.flat_end);
  std::vector<float> out;
  for (const std::int64_t g : naive_offsets(layout)) out.push_back(g < 0 ? 0.0f : whole.data<float>()[g]);
  return out;
}

ShardedTensor piece_of(const std::string& key, const wf::nn::ParameterShard& shard, std::int64_t begin,
                       std::int64_t end, bool writer, Tensor data) {
  return {key, shard, begin, end, writer, std::move(data)};
}

}  // namespace

TEST_CASE("piece_runs maps every element of a piece as the element-by-element reference does",
          "[train][distributed_checkpoint]") {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const RandomPiece piece = random_piece(gen);
    const auto layout = detail::PieceLayout::of(piece.shard, piece.flat_begin, piece.flat_end);
    INFO(detail::layout_str(layout));
    REQUIRE(run_offsets(layout) == naive_offsets(layout));
    const auto runs = detail::piece_runs(layout);
    for (std::size_t i = 1; i < runs.size(); ++i) REQUIRE(runs[i - 1].global + runs[i - 1].count < runs[i].global + 1);
  }
  // The parts of one split tile their tensor, padding rows dropped; two copies of a part do not.
  const auto shard = [](int index) { return wf::nn::ParameterShard::split_padded("tp", {8, 3}, 0, 4, index, 7); };
  std::vector<detail::PieceLayout> parts;
  for (int i = 0; i < 4; ++i) parts.push_back(detail::PieceLayout::of(shard(i), 0, 6));
  CHECK(detail::tiling_problem({7, 3}, parts).empty());
  parts.push_back(parts[1]);
  CHECK_THAT(detail::tiling_problem({7, 3}, parts), Contains("more than one piece"));
  parts.resize(3);
  CHECK_THAT(detail::tiling_problem({7, 3}, parts), Contains("elements [18, 21) are in no piece"));
}

TEST_CASE("a distributed checkpoint loads into any piece of its tensors, a version 3 one too",
          "[train][distributed_checkpoint]") {
  wf::comm::Runtime::init();  // a world of one: no mpirun needed
  wf::comm::CommGrid grid(wf::comm::ProcessGrid(wf::comm::ParallelConfig{}, 1, 0));
  TempDir tmp;
  CheckpointStore store(tmp.file("ckpt"), 0);
  std::mt19937 gen(11);
  // One tensor saved as a whole piece; a piece this rank does not write is not stored.
  const Tensor whole = Tensor::randn({7, 5}, wf::DType::f32);
  const auto half = [](int index) { return wf::nn::ParameterShard::split_padded("tp", {8, 5}, 0, 2, index, 7); };
  ShardedStateDict saved = {piece_of("w", wf::nn::ParameterShard::replicated({7, 5}), 0, 35, true, whole),
                            piece_of("unwritten", half(0), 0, 20, false, Tensor::zeros({4, 5}))};
  const std::string dir = save_sharded_checkpoint(store, 3, saved, {{"rng.offset", "5"}}, "model: {}\n",
                                                  grid.group("world"));
  CHECK(dir == tmp.file("ckpt") + "/step-00000003");
  CHECK(std::filesystem::exists(dir + "/rank-00000.safetensors"));
  CheckpointReader reader(dir);
  CHECK(reader.version() == 4);
  CHECK(reader.step() == 3);
  CHECK(reader.state().at("rng.offset") == "5");
  CHECK(reader.world_size() == 1);
  CHECK(reader.find("unwritten") == nullptr);

  // Random targets over a [7, 5] tensor: slices along either dim, padded, flat sub-ranges.
  for (int trial = 0; trial < 200; ++trial) {
    RandomPiece target = random_piece(gen);
    const int dim = target.shard.dim;
    const int parts = target.shard.parts;
    const int index = target.shard.index;
    if (dim < 0) {
      target.shard = wf::nn::ParameterShard::replicated({7, 5});
    } else {
      const int d = dim % 2;
      Shape padded = {7, 5};
      padded[static_cast<std::size_t>(d)] = (padded[static_cast<std::size_t>(d)] + parts - 1) / parts * parts;
      target.shard = wf::nn::ParameterShard::split_padded("tp", padded, d, parts, index, d == 0 ? 7 : 5);
    }
    const std::int64_t n = wf::shape_numel(target.shard.local_shape());
    target.flat_begin = std::uniform_int_distribution<std::int64_t>(0, n)(gen);
    target.flat_end = std::uniform_int_distribution<std::int64_t>(target.flat_begin, n)(gen);
    ShardedStateDict targets = {piece_of("w", target.shard, target.flat_begin, target.flat_end, false,
                                         Tensor::full({target.flat_end - target.flat_begin}, 9.0))};
    reader.load(targets);
    INFO(wf::nn::shard_str(target.shard) << " [" << target.flat_begin << ", " << target.flat_end << ")");
    REQUIRE(targets[0].data.to_vector<float>() == naive_piece(whole, target));
  }

  SECTION("a version 3 checkpoint reads through the same reader, as whole pieces") {
    Checkpoint v3;
    v3.step = 4;
    v3.model.insert("w", whole);
    v3.optimizer.insert("w.step", Tensor::scalar(2, wf::DType::i64));
    CheckpointReader old(store.save(v3));
    CHECK(old.version() == 3);
    REQUIRE(old.find("w.step") != nullptr);
    CHECK(is_optimizer_key("w.step"));
    CHECK(!is_optimizer_key("w"));
    ShardedStateDict targets = {piece_of("w", half(1), 0, 20, false, Tensor::zeros({4, 5}))};
    old.load(targets);
    CHECK(targets[0].data.to_vector<float>() == naive_piece(whole, {half(1), 0, 20}));
  }
  SECTION("a target of another shape, or a key the checkpoint lacks, is refused naming the key") {
    ShardedStateDict other = {piece_of("w", wf::nn::ParameterShard::replicated({5, 7}), 0, 35, false, Tensor::zeros({35}))};
    CHECK_THROWS_WITH(reader.load(other), Contains("tensor 'w' is f32 [7, 5] in the checkpoint but f32 [5, 7] here"));
    ShardedStateDict missing = {piece_of("v", wf::nn::ParameterShard::replicated({1}), 0, 1, false, Tensor::zeros({1}))};
    CHECK_THROWS_WITH(reader.load(missing), Contains("holds no tensor 'v'"));
  }
  SECTION("a missing rank file is refused naming it; a damaged one fails its checksum naming it") {
    const std::string file = dir + "/rank-00000.safetensors";
    std::string bytes;
    {
      std::ifstream in(file, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    bytes[bytes.size() - 3] ^= 0x55;
    std::filesystem::remove(file);
    CHECK_THROWS_WITH(CheckpointReader(dir), Contains("checkpoint file '" + file + "' is missing"));
    std::ofstream(file, std::ios::binary) << bytes;
    CheckpointReader damaged(dir);  // present and of its size
    CHECK_THROWS_WITH(damaged.load_whole("w"), Contains("checkpoint file '" + file + "' fails its checksum"));
  }
  SECTION("pieces that do not tile their tensor fail the save, nothing left behind") {
    ShardedStateDict partial = {piece_of("w", half(0), 0, 20, true, Tensor::zeros({4, 5}))};
    CHECK_THROWS_WITH(save_sharded_checkpoint(store, 5, partial, {}, "", grid.group("world")),
                      Contains("rank 0: ") && Contains("tensor 'w'") && Contains("elements [20, 35) are in no piece"));
    CHECK(store.list().size() == 1);
    for (const auto& entry : std::filesystem::directory_iterator(tmp.file("ckpt"))) {
      CHECK(entry.path().filename().string().rfind(".tmp-", 0) != 0);
    }
  }
}
