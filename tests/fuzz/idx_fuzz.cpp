// Fuzzes the IDX image reader behind data::load_idx_dataset (Fashion-MNIST): the magic, the
// extents against the data (raw or gzip, which zlib tells apart by the first bytes), the two
// files' counts; then checks what an accepted pair promises and resizes it.
//
// The input is both files and a resize: byte 0 picks the output size (0: none, else 1 + b % 16),
// bytes 1-2 are the images file's length (little-endian u16, cut to what is there), then the
// images file, then the labels file. IDX files are full of NUL bytes, so a length splits them,
// not a separator (tests/fuzz/make_corpus.py writes the seeds in this layout).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/fuzz/fuzz_input.h"
#include "wallfacer/data/idx_images.h"

namespace {

// The most f32 elements a resize may make: far below -rss_limit_mb, whatever N the input holds.
constexpr std::int64_t kMaxResizedElements = std::int64_t{1} << 22;

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "idx fuzz: %s\n", what);
  std::abort();
}

// What load_idx_dataset documents for an accepted pair.
void check_dataset(const wf::data::ImageDataset& set) {
  const wf::Tensor& images = set.images;
  const wf::Tensor& labels = set.labels;
  if (images.dim() != 4 || images.size(1) != 1 || images.dtype() != wf::DType::f32) broken("images are not [N, 1, H, W] f32");
  if (labels.dim() != 1 || labels.size(0) != images.size(0) || labels.dtype() != wf::DType::i64) broken("labels are not [N] i64");
  const float* pixels = images.data<float>();
  for (std::int64_t i = 0; i < images.numel(); ++i) {
    if (!(pixels[i] >= -1.0f && pixels[i] <= 1.0f)) broken("a pixel outside [-1, 1]");
  }
  const std::int64_t* label = labels.data<std::int64_t>();
  const std::int64_t max_label = *std::max_element(label, label + labels.numel());
  if (set.num_classes != max_label + 1 || set.num_classes > 256) broken("num_classes is not max label + 1 <= 256");
  if (*std::min_element(label, label + labels.numel()) < 0) broken("a negative label");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  static const std::string images_path = (wf::fuzz::scratch_dir() / "images.idx").string();
  static const std::string labels_path = (wf::fuzz::scratch_dir() / "labels.idx").string();
  const std::int64_t resize = data[0] == 0 ? 0 : 1 + data[0] % 16;
  const std::size_t images_bytes = std::min<std::size_t>(data[1] | (std::size_t{data[2]} << 8), size - 3);
  wf::fuzz::write_file(images_path, wf::fuzz::input(data + 3, images_bytes));
  wf::fuzz::write_file(labels_path, wf::fuzz::input(data + 3 + images_bytes, size - 3 - images_bytes));

  wf::fuzz::refusing_only_with_wf_error([&] {
    const wf::data::ImageDataset set = wf::data::load_idx_dataset(images_path, labels_path);
    check_dataset(set);
    if (resize == 0 || set.images.size(0) * resize * resize > kMaxResizedElements) return;
    const wf::Tensor resized = wf::data::resize_bilinear(set.images, resize, resize);
    const float* pixels = resized.data<float>();
    for (std::int64_t i = 0; i < resized.numel(); ++i) {
      // Bilinear weights are convex: a resize never leaves [-1, 1] (float rounding aside).
      if (!(pixels[i] >= -1.0001f && pixels[i] <= 1.0001f)) broken("a resized pixel outside [-1, 1]");
    }
  });
  return 0;
}
