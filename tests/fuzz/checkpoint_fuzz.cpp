// Fuzzes the checkpoint manifest through the public CheckpointStore::load: the input is
// <scratch>/step-00000001/manifest.json, next to a valid model.safetensors and
// optimizer.safetensors that the store itself wrote once at start-up.
//
// Each input is loaded twice: as given, and "resealed" — when it is a JSON object, with its
// manifest_sha256 recomputed by the documented rule (docs/checkpoints.md: the SHA-256 of the
// compact ordered_json dump without that field). The first run covers what an accidental
// corruption meets; the second what a crafted manifest meets, since a mutated manifest almost
// never matches its own checksum and would otherwise stop every input at that check. Should the
// rule change, resealing merely stops getting past the checksum; it never causes a finding.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "src/train/json_limits.h"
#include "src/train/sha256.h"
#include "tests/fuzz/fuzz_input.h"
#include "wallfacer/train/checkpoint.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// A tiny real checkpoint: the files the manifests of the seed corpus describe
// (tests/fuzz/corpus/checkpoint/valid-manifest.json holds the manifest this writes).
wf::train::Checkpoint tiny_checkpoint() {
  wf::train::Checkpoint checkpoint;
  checkpoint.step = 1;
  wf::Tensor weight = wf::Tensor::empty({2, 3}, wf::DType::f32);
  std::memset(weight.raw_data(), 0, weight.nbytes());
  wf::Tensor moment = wf::Tensor::empty({4}, wf::DType::i64);
  std::memset(moment.raw_data(), 0, moment.nbytes());
  checkpoint.model.insert("weight", weight);
  checkpoint.optimizer.insert("weight.exp_avg", moment);
  checkpoint.config_yaml = "model:\n  name: gpt\n";
  checkpoint.state = {{"rng", "7"}, {"data_position", "12"}};
  return checkpoint;
}

struct Store {
  wf::train::CheckpointStore store{wf::fuzz::scratch_dir().string(), 0};
  std::string step_dir = store.save(tiny_checkpoint());
  fs::path manifest = fs::path(step_dir) / "manifest.json";
  // The manifest the store wrote, before the inputs overwrite it: the seed corpus's valid one
  // (WF_FUZZ_KEEP_SCRATCH=1 keeps it for refreshing the seed after a format change).
  Store() {
    fs::copy_file(manifest, wf::fuzz::scratch_dir() / "saved-manifest.json");
    // The one rank file of the format-4 seed (corpus/checkpoint/v4-manifest.json, a real
    // one-process checkpoint): with it present, a v4 manifest gets past the file checks into the
    // piece index and the resharding reader.
    fs::copy_file(fs::path(WF_SOURCE_DIR) / "tests/fuzz/data/rank-00000.safetensors",
                  fs::path(step_dir) / "rank-00000.safetensors");
  }
};

void load(const Store& s, std::string_view manifest) {
  wf::fuzz::write_file(s.manifest, manifest);
  wf::fuzz::refusing_only_with_wf_error([&] { (void)s.store.load(s.step_dir); });
}

// `text` with its manifest_sha256 recomputed; nullopt for invalid JSON, JSON nested too deep to
// dump safely, anything but an object, or an object that cannot be dumped (invalid UTF-8).
std::optional<std::string> reseal(std::string_view text) {
  try {
    Json manifest = wf::train::detail::parse_bounded_json(std::string(text), "fuzz manifest");
    if (!manifest.is_object()) return std::nullopt;
    Json without = manifest;
    without.erase("manifest_sha256");
    manifest["manifest_sha256"] = wf::train::detail::sha256_hex(without.dump());
    return manifest.dump(2);
  } catch (const Json::exception&) {
    return std::nullopt;
  } catch (const wf::Error&) {
    return std::nullopt;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Store s;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  load(s, text);

  const std::optional<std::string> resealed = reseal(text);
  if (resealed) load(s, *resealed);
  return 0;
}
