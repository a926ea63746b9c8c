#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/data_testing.h"
#include "train/train_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/train/safetensors.h"

using namespace wf;
using namespace wf::train;
using Catch::Matchers::Contains;
using wf::data::testing::read_bytes;
using wf::data::testing::TempDir;
using wf::data::testing::write_bytes;

namespace {

std::string u64_bytes(std::uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

// A file made of a header length, a header text and data bytes, each as a test wants it.
std::string file_with_header(const std::string& header, const std::string& data = "") {
  return u64_bytes(header.size()) + header + data;
}

void require_load_error(const std::string& path, const std::string& problem) {
  try {
    load_safetensors(path);
    FAIL("loading " << path << " should have failed with '" << problem << "'");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK_THAT(e.what(), Contains(path) && Contains(problem));
  }
}

}  // namespace

TEST_CASE("safetensors round-trips every dtype, 0-dim and empty tensors and metadata", "[train][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("all.safetensors");
  const nn::StateDict tensors = testing::reference_tensors();
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "héllo \"quoted\""}};
  save_safetensors(path, tensors, metadata);
  const SafetensorsContents loaded = load_safetensors(path);
  testing::require_same(loaded.tensors, tensors);
  CHECK(loaded.metadata == metadata);
  CHECK(dir.entries() == std::vector<std::string>{"all.safetensors"});  // no temporary left behind

  // No tensors and no metadata is a valid file too; saving again replaces the file.
  save_safetensors(path, {});
  CHECK(load_safetensors(path).tensors.empty());
  CHECK(load_safetensors(path).metadata.empty());
}

TEST_CASE("safetensors files are byte-exact to the format", "[train][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("exact.safetensors");
  nn::StateDict tensors;
  tensors.insert("w", Tensor::from_vector<float>({1.0f, -2.5f}, {2}));
  tensors.insert("n", Tensor::from_vector<std::int64_t>({7}, {}));
  save_safetensors(path, tensors, {{"k", "v"}});

  const std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() >= 8);
  std::uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  CHECK(header_length % 8 == 0);  // the data starts 8-byte aligned
  REQUIRE(bytes.size() == 8 + header_length + 16);
  std::string header = bytes.substr(8, header_length);
  // The header in StateDict order; the data by element size, the 8-byte i64 first.
  const std::string json =
      R"({"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
      R"("n":{"dtype":"I64","shape":[],"data_offsets":[0,8]}})";
  CHECK(header == json + std::string(header_length - json.size(), ' '));

  std::string data(16, '\0');
  const float w[2] = {1.0f, -2.5f};
  const std::int64_t n = 7;
  std::memcpy(data.data(), &n, 8);
  std::memcpy(data.data() + 8, w, 8);
  CHECK(bytes.substr(8 + header_length) == data);
}

TEST_CASE("every tensor's data is aligned for its dtype", "[train][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("aligned.safetensors");
  const nn::StateDict tensors = testing::reference_tensors();
  save_safetensors(path, tensors);
  const std::string bytes = read_bytes(path);
  std::uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  const auto header = nlohmann::ordered_json::parse(bytes.substr(8, header_length));
  std::vector<std::string> order;
  for (const auto& [name, info] : header.items()) {
    order.push_back(name);
    const auto begin = info["data_offsets"][0].get<std::uint64_t>();
    INFO(name << " at data offset " << begin);
    CHECK((8 + header_length + begin) % dtype_size(tensors.at(name).dtype()) == 0);
  }
  CHECK(order == tensors.keys());  // the header keeps StateDict order
  testing::require_same(load_safetensors(path).tensors, tensors);
}

TEST_CASE("safetensors loading names the file and the problem", "[train][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");

  require_load_error(dir.file("missing.safetensors"), "No such file");

  write_bytes(path, "abcde");
  require_load_error(path, "shorter than the 8-byte header length");

  write_bytes(path, u64_bytes(1000) + "{}");
  require_load_error(path, "header length 1000 reaches beyond the file");

  write_bytes(path, file_with_header("{not json"));
  require_load_error(path, "invalid JSON header");

  // Two million levels of nesting: refused at level 128, not a stack overflow (the message must
  // not print the header either).
  write_bytes(path, file_with_header(std::string(2'000'000, '[') + std::string(2'000'000, ']')));
  require_load_error(path, "the header nests JSON deeper than 128 levels");
  write_bytes(path, file_with_header(R"({"__metadata__":)" + std::string(500, '[') + std::string(500, ']') + "}"));
  require_load_error(path, "deeper than 128 levels");

  write_bytes(path, file_with_header("[1, 2]"));
  require_load_error(path, "must be a JSON object");

  write_bytes(path, file_with_header(R"({"x":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})", "abcd"));
  require_load_error(path, "tensor 'x' has unknown dtype 'Q7'");

  write_bytes(path, file_with_header(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd"));
  require_load_error(path, "the shape and the offsets are inconsistent");

  write_bytes(path, file_with_header(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd"));
  require_load_error(path, "must be a non-negative integer");

  write_bytes(path, file_with_header(R"({"x":{"dtype":"F32","shape":[1]}})", "abcd"));
  require_load_error(path, "must be an object with dtype, shape and data_offsets");

  write_bytes(path, file_with_header(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", "abcd"));
  require_load_error(path, "without gaps or overlaps");

  write_bytes(path, file_with_header(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "abcd"));
  require_load_error(path, "the tensors cover 2 data bytes but the file holds 4");

  write_bytes(path, file_with_header(R"({"__metadata__":{"k":1}})"));
  require_load_error(path, "value of 'k' must be a string");

  // A real file cut short: the last tensor's offsets pass the end of the file.
  save_safetensors(path, testing::reference_tensors());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 3);
  require_load_error(path, "is truncated: tensor 'u8' ends at data offset");
}

TEST_CASE("a failing safetensors save names the path and leaves the old file", "[train][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  nn::StateDict small;
  small.insert("a", Tensor::ones({4}));
  save_safetensors(path, small);
  const std::string before = read_bytes(path);

  nn::StateDict big;
  big.insert("a", Tensor::ones({1 << 16}));
  {
    const testing::FileSizeLimit disk_full(4096);
    CHECK_THROWS_WITH(save_safetensors(path, big), Contains(path) && Contains("File too large"));
  }
  CHECK(read_bytes(path) == before);
  CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});

  // A directory that cannot exist (its parent is a file).
  const std::string impossible = dir.file("model.safetensors") + "/x.safetensors";
  CHECK_THROWS_WITH(save_safetensors(impossible, small), Contains(impossible));

  nn::StateDict reserved;
  reserved.insert("__metadata__", Tensor::ones({1}));
  CHECK_THROWS_WITH(save_safetensors(dir.file("r.safetensors"), reserved), Contains("is reserved"));
}

// Writes the reference tensors where tests/reference/read_safetensors.py reads them (CTest runs
// the pair when the system python has torch; see tests/CMakeLists.txt).
TEST_CASE("write the PyTorch reference file", "[.safetensors_reference]") {
  const char* out = std::getenv("WF_SAFETENSORS_OUT");
  REQUIRE(out != nullptr);
  save_safetensors(out, testing::reference_tensors(), {{"format", "pt"}, {"writer", "wallfacer"}});
}
