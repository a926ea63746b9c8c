#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/data_testing.h"
#include "src/train/sha256.h"  // internal: the manifest's checksum, recomputed by a deliberate edit
#include "train/train_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"
#include "wallfacer/nn/linear.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/safetensors.h"

using namespace wf;
using namespace wf::train;
using Catch::Matchers::Contains;
using wf::data::testing::read_bytes;
using wf::data::testing::TempDir;
using wf::data::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

Checkpoint make_checkpoint(std::int64_t step, std::int64_t model_elements = 6) {
  Checkpoint c;
  c.step = step;
  c.model.insert("embed.weight", Tensor::randn_at({model_elements}, /*seed=*/static_cast<std::uint64_t>(step), 0));
  c.model.insert("norm.weight", Tensor::ones({3}, DType::bf16));
  c.optimizer.insert("state.0.step", Tensor::scalar(static_cast<double>(step), DType::i64));
  c.optimizer.insert("state.0.exp_avg", Tensor::randn_at({model_elements}, 99, 0));
  c.config_yaml = "model:\n  name: gpt-tiny\ntrain:\n  steps: 100\n";
  c.state = {{"rng.seed", "1234"}, {"data.position", std::to_string(step * 4096)}, {"note", "ünïcode ok"}};
  return c;
}

void require_same(const Checkpoint& got, const Checkpoint& want) {
  CHECK(got.step == want.step);
  CHECK(got.config_yaml == want.config_yaml);
  CHECK(got.state == want.state);
  testing::require_same(got.model, want.model);
  testing::require_same(got.optimizer, want.optimizer);
}

std::vector<std::string> names(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) out.push_back(fs::path(p).filename().string());
  return out;
}

bool has_tmp_entries(const std::string& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind(".tmp-", 0) == 0) return true;
  }
  return false;
}

void flip_last_byte(const std::string& path) {
  std::string bytes = read_bytes(path);
  bytes.back() = static_cast<char>(bytes.back() ^ 0x01);
  write_bytes(path, bytes);
}

// Collects what is written to stderr (wf::log's sink) while alive.
class StderrCapture {
 public:
  explicit StderrCapture(std::string path) : path_(std::move(path)) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrCapture() { restore(); }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  std::string text() {
    restore();
    return read_bytes(path_);
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

using OrderedJson = nlohmann::ordered_json;

OrderedJson read_manifest(const std::string& dir) { return OrderedJson::parse(read_bytes(dir + "/manifest.json")); }

// Writes `manifest` with a checksum recomputed the way the writer computes it (docs/checkpoints.md):
// an edit made on purpose, which only the checks after the checksum can catch.
void write_resealed(const std::string& dir, OrderedJson manifest) {
  manifest.erase("manifest_sha256");
  manifest["manifest_sha256"] = wf::train::detail::sha256_hex(manifest.dump());
  write_bytes(dir + "/manifest.json", manifest.dump(2));
}

void require_load_error(const CheckpointStore& store, const std::string& dir, const std::vector<std::string>& parts) {
  try {
    store.load(dir);
    FAIL("loading " << dir << " should have failed");
  } catch (const Error& e) {
    INFO(e.what());
    for (const auto& part : parts) CHECK_THAT(e.what(), Contains(part));
  }
}

}  // namespace

TEST_CASE("a checkpoint round-trips with its manifest", "[train][checkpoint]") {
  TempDir tmp;
  const std::string root = tmp.file("ckpt");
  CheckpointStore store(root, /*keep=*/0);
  CHECK_FALSE(store.load_latest().has_value());  // no directory yet
  CHECK(store.list().empty());

  const Checkpoint saved = make_checkpoint(10);
  const std::string dir = store.save(saved);
  CHECK(dir == (fs::path(root) / "step-00000010").string());
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  CHECK(files == std::vector<std::string>{"manifest.json", "model.safetensors", "optimizer.safetensors"});

  const auto manifest = nlohmann::json::parse(read_bytes(dir + "/manifest.json"));
  CHECK(manifest["format"] == "wallfacer-checkpoint");
  CHECK(manifest["version"] == 3);
  CHECK(manifest["step"] == 10);
  CHECK(manifest["config_yaml"] == saved.config_yaml);
  CHECK(manifest["state"]["data.position"] == "40960");
  CHECK(manifest["files"]["model.safetensors"]["bytes"] == fs::file_size(dir + "/model.safetensors"));
  CHECK(manifest["files"]["model.safetensors"]["sha256"].get<std::string>().size() == 64);
  CHECK(manifest["manifest_sha256"].get<std::string>().size() == 64);

  // The parts are plain safetensors files.
  testing::require_same(load_safetensors(dir + "/model.safetensors").tensors, saved.model);

  require_same(store.load(dir), saved);
  const auto latest = store.load_latest();
  REQUIRE(latest.has_value());
  require_same(*latest, saved);
  CHECK(names(store.list()) == std::vector<std::string>{"step-00000010"});
}

TEST_CASE("a corrupted or truncated checkpoint fails with its checksum and the fix", "[train][checkpoint]") {
  TempDir tmp;
  CheckpointStore store(tmp.file("ckpt"), 0);

  SECTION("a flipped byte in the data") {
    const std::string dir = store.save(make_checkpoint(1));
    flip_last_byte(dir + "/model.safetensors");
    require_load_error(store, dir, {dir + "/model.safetensors", "fails its checksum", "expected SHA-256",
                                    "actual", "the checkpoint is corrupt; delete " + dir});
  }
  SECTION("a flipped byte in a header is caught before parsing") {
    const std::string dir = store.save(make_checkpoint(1));
    std::string bytes = read_bytes(dir + "/optimizer.safetensors");
    bytes[8] = 'X';  // the header's opening brace
    write_bytes(dir + "/optimizer.safetensors", bytes);
    require_load_error(store, dir, {dir + "/optimizer.safetensors", "fails its checksum"});
  }
  SECTION("a truncated file") {
    const std::string dir = store.save(make_checkpoint(1));
    fs::resize_file(dir + "/model.safetensors", 20);
    require_load_error(store, dir, {dir + "/model.safetensors", "is 20 bytes but its manifest records", "delete " + dir});
  }
  SECTION("a missing file") {
    const std::string dir = store.save(make_checkpoint(1));
    fs::remove(dir + "/optimizer.safetensors");
    require_load_error(store, dir, {dir + "/optimizer.safetensors", "missing", "delete " + dir});
  }
  SECTION("a missing or garbled manifest") {
    const std::string dir = store.save(make_checkpoint(1));
    write_bytes(dir + "/manifest.json", "{\"format\": ");
    require_load_error(store, dir, {dir + "/manifest.json", "not valid JSON", "delete " + dir});
    fs::remove(dir + "/manifest.json");
    require_load_error(store, dir, {"is incomplete", "delete " + dir});
    CHECK(store.list().empty());  // incomplete checkpoints are not listed
  }
  // Version 1: positional optimizer keys, the old qkv layout; 2: no manifest checksum; 5: a future one.
  for (const int version : {1, 2, 5}) {
    DYNAMIC_SECTION("a manifest of format version " << version) {
      const std::string dir = store.save(make_checkpoint(1));
      auto manifest = nlohmann::ordered_json::parse(read_bytes(dir + "/manifest.json"));
      manifest["version"] = version;
      write_bytes(dir + "/manifest.json", manifest.dump());
      require_load_error(store, dir, {fmt::format("format version {}", version), "reads versions 3 and 4"});
    }
  }
}

TEST_CASE("load_latest falls back past a corrupt or incomplete newest checkpoint", "[train][checkpoint]") {
  TempDir tmp;
  CheckpointStore store(tmp.file("ckpt"), 0);
  const Checkpoint first = make_checkpoint(10);
  store.save(first);
  const std::string second = store.save(make_checkpoint(20));
  const std::string third = store.save(make_checkpoint(30));
  flip_last_byte(third + "/optimizer.safetensors");
  fs::remove(second + "/manifest.json");

  StderrCapture capture(tmp.file("log.txt"));
  const auto latest = store.load_latest();
  const std::string warnings = capture.text();
  REQUIRE(latest.has_value());
  require_same(*latest, first);
  if (log::enabled(log::Level::warn)) {  // WF_LOG_LEVEL may silence it
    CHECK_THAT(warnings, Contains("skipping checkpoint '" + third + "'") && Contains("fails its checksum") &&
                             Contains("skipping checkpoint '" + second + "'") && Contains("is incomplete"));
  }

  // Nothing loads: an error rather than a silent fresh start.
  flip_last_byte(fs::path(tmp.file("ckpt")) / "step-00000010" / "model.safetensors");
  CHECK_THROWS_WITH(store.load_latest(), Contains("none of the 3 checkpoints") && Contains(tmp.file("ckpt")));
}

TEST_CASE("keep prunes to the newest checkpoints", "[train][checkpoint]") {
  TempDir tmp;
  CheckpointStore store(tmp.file("ckpt"), /*keep=*/2);
  for (const std::int64_t step : {1, 2, 3, 4}) store.save(make_checkpoint(step));
  CHECK(names(store.list()) == std::vector<std::string>{"step-00000003", "step-00000004"});
  // A checkpoint older than those kept (a resumed run that went back) is itself never pruned.
  store.save(make_checkpoint(2));
  CHECK(names(store.list()) == std::vector<std::string>{"step-00000002", "step-00000004"});
  CHECK_FALSE(has_tmp_entries(tmp.file("ckpt")));

  CheckpointStore keep_all(tmp.file("all"), 0);
  for (const std::int64_t step : {5, 100, 123456789}) keep_all.save(make_checkpoint(step));
  // Ordered by step, not by name (the last one is wider than 8 digits).
  CHECK(names(keep_all.list()) == std::vector<std::string>{"step-00000005", "step-00000100", "step-123456789"});
  CHECK_THROWS_WITH(CheckpointStore(tmp.file("x"), -1), Contains("keep must be 0"));
}

TEST_CASE("saving a step again replaces it; leftovers of interrupted saves are ignored and cleaned",
          "[train][checkpoint]") {
  TempDir tmp;
  const std::string root = tmp.file("ckpt");
  CheckpointStore store(root, 0);
  store.save(make_checkpoint(5));
  Checkpoint again = make_checkpoint(5, /*model_elements=*/9);
  again.state["rng.seed"] = "other";
  const std::string dir = store.save(again);
  require_same(store.load(dir), again);

  // A crash mid-save leaves a .tmp-* directory: not a checkpoint, and the next save removes it.
  fs::create_directories(root + "/.tmp-step-00000099-1/");
  write_bytes(root + "/.tmp-step-00000099-1/model.safetensors", "partial");
  CHECK(names(store.list()) == std::vector<std::string>{"step-00000005"});
  require_same(*store.load_latest(), again);
  store.save(make_checkpoint(6));
  CHECK_FALSE(has_tmp_entries(root));
}

TEST_CASE("a failing save leaves the previous checkpoint intact", "[train][checkpoint]") {
  TempDir tmp;
  const std::string root = tmp.file("ckpt");
  CheckpointStore store(root, /*keep=*/1);
  const Checkpoint first = make_checkpoint(1);
  store.save(first);
  {
    // The disk "fills up" while the model file of step 2 is written.
    const testing::FileSizeLimit disk_full(16384);
    CHECK_THROWS_WITH(store.save(make_checkpoint(2, /*model_elements=*/1 << 16)),
                      Contains("step-00000002") && Contains("model.safetensors") && Contains("File too large"));
  }
  CHECK(names(store.list()) == std::vector<std::string>{"step-00000001"});
  CHECK_FALSE(has_tmp_entries(root));
  require_same(*store.load_latest(), first);

  {
    // Replacing the same step fails too: the old one stays.
    const testing::FileSizeLimit disk_full(16384);
    CHECK_THROWS(store.save(make_checkpoint(1, 1 << 16)));
  }
  require_same(*store.load_latest(), first);

  // Non-UTF-8 state cannot go into the JSON manifest: a clear error, nothing written.
  Checkpoint binary = make_checkpoint(3);
  binary.state["rng"] = std::string("\xff\xfe", 2);
  CHECK_THROWS_WITH(store.save(binary), Contains("valid UTF-8"));
  CHECK(names(store.list()) == std::vector<std::string>{"step-00000001"});
  CHECK_FALSE(has_tmp_entries(root));
}

TEST_CASE("an edited manifest fails its own checksum before any of it is used", "[train][checkpoint]") {
  TempDir tmp;
  CheckpointStore store(tmp.file("ckpt"), 0);
  const std::string dir = store.save(make_checkpoint(6));
  const std::vector<std::string> fails = {dir + "/manifest.json", "fails its checksum", "was edited or damaged",
                                          "delete " + dir};

  SECTION("its step (which would resume step 6's weights as step 5)") {
    auto manifest = read_manifest(dir);
    manifest["step"] = 5;
    write_bytes(dir + "/manifest.json", manifest.dump(2));
    require_load_error(store, dir, fails);
    store.save(make_checkpoint(3));
    CHECK(store.load_latest()->step == 3);  // load_latest falls back past it like any corrupt one
  }
  SECTION("a state value, the config, a file's checksum, or the checksum itself") {
    for (const auto& pointer : {"/state/rng.seed", "/config_yaml", "/files/model.safetensors/sha256",
                                "/manifest_sha256"}) {
      auto manifest = read_manifest(dir);
      manifest[OrderedJson::json_pointer(pointer)] = std::string(64, 'a');
      write_bytes(dir + "/manifest.json", manifest.dump());
      INFO(pointer);
      require_load_error(store, dir, fails);
    }
  }
  SECTION("a checksum removed") {
    auto manifest = read_manifest(dir);
    manifest.erase("manifest_sha256");
    write_bytes(dir + "/manifest.json", manifest.dump());
    require_load_error(store, dir, {"field 'manifest_sha256' is missing"});
  }
  SECTION("its layout is not content: re-indented, it still loads") {
    write_bytes(dir + "/manifest.json", read_manifest(dir).dump(4));
    CHECK(store.load(dir).step == 6);
  }
  SECTION("nested two million levels deep: an error, not a stack overflow") {
    write_bytes(dir + "/manifest.json", std::string(2'000'000, '[') + std::string(2'000'000, ']'));
    require_load_error(store, dir, {dir + "/manifest.json", "nests JSON deeper than 128 levels"});
  }
  SECTION("larger than any manifest") {
    fs::resize_file(dir + "/manifest.json", std::uintmax_t{65} << 20);  // sparse: cheap to make
    require_load_error(store, dir, {dir + "/manifest.json", "above the limit", "delete " + dir});
  }
}

TEST_CASE("a checkpoint's step must be its directory's", "[train][checkpoint]") {
  TempDir tmp;
  const std::string root = tmp.file("ckpt");
  CheckpointStore store(root, 0);
  store.save(make_checkpoint(3));
  const std::string dir = store.save(make_checkpoint(6));

  SECTION("a step edited and the checksum recomputed") {
    auto manifest = read_manifest(dir);
    manifest["step"] = 5;
    write_resealed(dir, manifest);
    require_load_error(store, dir, {dir, "its manifest records step 5 but the directory is named 'step-00000006'",
                                    "rename it to step-00000005"});
  }
  SECTION("a negative step, resealed: corrupt (no save wrote it), never 'rename it to step--0000005'") {
    auto manifest = read_manifest(dir);
    manifest["step"] = -5;
    write_resealed(dir, manifest);
    require_load_error(store, dir, {dir + "/manifest.json", "records step -5, but steps count from 0",
                                    "the checkpoint is corrupt; delete " + dir + " to resume from the previous one"});
    CHECK_THROWS_WITH(store.load(dir), !Contains("step--"));
    CHECK(store.load_latest()->step == 3);  // and load_latest falls back past it
  }
  SECTION("a directory renamed: skipped by load_latest, which falls back") {
    const std::string renamed = root + "/step-00000009";
    fs::rename(dir, renamed);
    require_load_error(store, renamed, {"records step 6 but the directory is named 'step-00000009'"});
    StderrCapture capture(tmp.file("log.txt"));
    CHECK(store.load_latest()->step == 3);
    const std::string warnings = capture.text();
    if (log::enabled(log::Level::warn)) CHECK_THAT(warnings, Contains("skipping checkpoint '" + renamed + "'"));
  }
  SECTION("a copy under another name, or the same directory named with a trailing slash or as '.'") {
    fs::copy(dir, root + "/best", fs::copy_options::recursive);
    require_load_error(store, root + "/best", {"the directory is named 'best'", "rename it to step-00000006"});
    CHECK(store.load(dir + "/").step == 6);
    const fs::path cwd = fs::current_path();
    fs::current_path(dir);
    const auto step = store.load(".").step;
    fs::current_path(cwd);
    CHECK(step == 6);
  }
}

TEST_CASE("state values are integers in range or refused", "[train][checkpoint]") {
  Checkpoint c = make_checkpoint(1);
  c.dir = "ckpt/step-00000001";
  c.state["max"] = "18446744073709551615";
  c.state["seven"] = "7";
  CHECK(state_uint(c, "max") == std::numeric_limits<std::uint64_t>::max());
  CHECK(state_uint(c, "seven", 7) == 7u);
  CHECK_FALSE(state_uint(c, "absent").has_value());
  CHECK_THROWS_WITH(state_uint(c, "seven", 6),
                    Contains("checkpoint 'ckpt/step-00000001': its state 'seven' is '7', not an integer from 0 to 6") &&
                        Contains("delete ckpt/step-00000001"));
  for (const std::string bad : {"-1", "18446744073709551616", "99999999999999999999999", "+5", " 5", "5 ", "5x", "",
                                "0x10", "1e3"}) {
    c.state["bad"] = bad;
    INFO("'" << bad << "'");
    CHECK_THROWS_WITH(state_uint(c, "bad"), Contains("its state 'bad' is '" + bad + "', not an integer from 0 to"));
  }
}

TEST_CASE("load_latest skips checkpoints its check rejects, and steps past at_most", "[train][checkpoint]") {
  TempDir tmp;
  CheckpointStore store(tmp.file("ckpt"), 0);
  for (const std::int64_t step : {10, 20, 30}) store.save(make_checkpoint(step));
  const CheckpointCheck reject_30 = [](const Checkpoint& c) {
    WF_CHECK(c.step != 30, "checkpoint '{}': tensor 'x' does not fit", c.dir);
  };
  StderrCapture capture(tmp.file("log.txt"));
  CHECK(store.load_latest(reject_30)->step == 20);
  const std::string warnings = capture.text();
  if (log::enabled(log::Level::warn)) {
    CHECK_THAT(warnings, Contains("skipping checkpoint '" + tmp.file("ckpt") + "/step-00000030'") &&
                             Contains("tensor 'x' does not fit"));
  }
  CHECK(store.load_latest({}, 25)->step == 20);
  CHECK(store.load_latest({}, 10)->step == 10);
  CHECK_FALSE(store.load_latest({}, 9).has_value());  // none at or below step 9
  const CheckpointCheck reject_all = [](const Checkpoint&) { WF_FAIL("does not fit"); };
  CHECK_THROWS_WITH(store.load_latest(reject_all), Contains("none of the 3 checkpoints"));
}

TEST_CASE("check_model_fits names the checkpoint and each tensor that differs",
          "[train][checkpoint]") {
  const nn::Linear model(3, 2);  // weight [2, 3], bias [2]
  Checkpoint c;
  c.dir = "ckpt/step-00000004";
  c.model = model.state_dict();
  check_model_fits(c, model);  // its own state fits

  // The checkpoint's model with `name` replaced by `tensor`.
  const auto with = [&](const std::string& name, const Tensor& tensor) {
    nn::StateDict out;
    for (const auto& [key, value] : c.model) out.insert(key, key == name ? tensor : value);
    return out;
  };
  const std::string where = "checkpoint 'ckpt/step-00000004': its model state does not fit";
  SECTION("a shape") {
    c.model = with("weight", Tensor::zeros({3, 3}));
    CHECK_THROWS_WITH(check_model_fits(c, model),
                      Contains(where) && Contains("tensor 'weight' has shape [3, 3] in the file but [2, 3] in the "
                                                  "model") &&
                          Contains("written for another model"));
  }
  SECTION("a dtype") {
    c.model = with("bias", Tensor::zeros({2}, DType::bf16));
    CHECK_THROWS_WITH(check_model_fits(c, model),
                      Contains(where) && Contains("tensor 'bias' has dtype bf16 in the file but f32 in the model"));
  }
  SECTION("a missing and an unexpected name") {
    nn::StateDict renamed;
    renamed.insert("weight", c.model.at("weight"));
    renamed.insert("bias2", c.model.at("bias"));
    c.model = renamed;
    CHECK_THROWS_WITH(check_model_fits(c, model), Contains(where) && Contains("tensor 'bias' is missing") &&
                                                      Contains("tensor 'bias2' is in the file but not in the model"));
  }
  SECTION("another model altogether: the first few") {
    for (int i = 0; i < 20; ++i) c.model.insert(fmt::format("extra{}", i), Tensor::zeros({1}));
    CHECK_THROWS_WITH(check_model_fits(c, model), Contains("'extra7'") && !Contains("'extra8'") && Contains("and 12 more"));
  }
}
