// The distributed checkpoint's save and resharding load in a world of one: a tensor saved as a
// whole piece loads into tp slices (padded or not) and flat ranges of them, a version 3
// checkpoint through the same reader, and what a damaged checkpoint or a save whose pieces do
// not tile their tensor is refused with.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "data/data_testing.h"
#include "train/piece_testing.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/error.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/distributed_checkpoint.h"

using Catch::Matchers::Contains;
using wf::Shape;
using wf::Tensor;
using wf::data::testing::TempDir;
using namespace wf::train;
using namespace wf::train::testing;

namespace {

ShardedTensor piece_of(const std::string& key, const wf::nn::ParameterShard& shard, std::int64_t begin,
                       std::int64_t end, bool writer, Tensor data) {
  return {key, shard, begin, end, writer, std::move(data)};
}

}  // namespace

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
