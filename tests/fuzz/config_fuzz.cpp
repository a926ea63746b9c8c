// Fuzzes the run-config path `wallfacer train` takes: YAML text -> parse_config (yaml-cpp
// behind the depth and size guards of src/config/yaml_input.cpp, every section's keys and the
// model schemas) -> validate against the layout's world size -> the derived facts a run prints
// (summary, notes, memory estimate), and the documented round trip: to_yaml of an accepted config
// parses back to an equal config.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "tests/fuzz/fuzz_input.h"
#include "wallfacer/config/model_schema.h"
#include "wallfacer/config/run_config.h"

namespace {

// The world the layout asks for (dp·tp·pp·sp), so that validation gets past the world-size
// check and into the rules behind it; 1 when the product is absurd (that check then refuses it).
int world_size_of(const wf::config::ParallelSection& p) {
  std::int64_t world = 1;
  for (const int degree : {p.dp, p.tp, p.pp, p.sp}) {
    if (degree < 1 || world * degree > (1 << 20)) return 1;
    world *= degree;
  }
  return static_cast<int>(world);
}

}  // namespace

// The model registrations are static initialisers of tests/fuzz's model object library; should
// the build ever drop them, every input would stop at "not a registered model" and the run
// would look clean while testing nothing.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  if (wf::config::find_model_schema("gpt") == nullptr || wf::config::find_model_schema("llama") == nullptr) {
    std::fprintf(stderr, "fuzz_config: the gpt and llama model schemas are not registered (linking problem)\n");
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  wf::fuzz::refusing_only_with_wf_error([&] {
    const wf::config::RunConfig config = wf::config::parse_config(yaml, {}, "fuzz.yaml");

    const std::string text = wf::config::to_yaml(config);
    if (!(wf::config::parse_config(text, {}, "to_yaml") == config)) {
      std::fprintf(stderr, "to_yaml does not round-trip; it wrote:\n%s\n", text.c_str());
      std::abort();
    }

    const int world = world_size_of(config.parallel);
    (void)wf::config::memory_per_rank(config);
    (void)wf::config::notes(config);
    // any_machine: the verdict depends on the input alone, not on this machine's memory.
    wf::config::validate(config, world, wf::config::ValidateScope::any_machine);
    (void)wf::config::summary(config, world);
    (void)wf::config::unsupported_by_trainer(config);
  });
  return 0;
}
