// Fuzzes wf::train::load_safetensors: the header length, the JSON header (dtypes, shapes,
// data_offsets, __metadata__) and the data section, i.e. any file a user points the model
// loader or the checkpoint store at.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "tests/fuzz/fuzz_input.h"
#include "wallfacer/train/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The reader takes a path (it preads the header and each tensor), so the input goes to a file.
  static const std::string path = (wf::fuzz::scratch_dir() / "input.safetensors").string();
  wf::fuzz::write_file(path, wf::fuzz::input(data, size));
  wf::fuzz::refusing_only_with_wf_error([&] {
    const wf::train::SafetensorsContents contents = wf::train::load_safetensors(path);
    // An accepted file has tensors that tile its data section: their bytes cannot exceed it.
    std::size_t bytes = 0;
    for (const auto& [name, tensor] : contents.tensors) bytes += tensor.nbytes();
    if (bytes > size) std::abort();
  });
  return 0;
}
