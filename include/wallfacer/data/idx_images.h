#pragma once
// Image data sets for the DiT: MNIST-style IDX files (Fashion-MNIST, Debian's
// dataset-fashion-mnist in /usr/share/datasets/fashion-mnist/) and seeded synthetic images.
//
// IDX layout (all big-endian):
//   offset 0   u16      0 (two zero bytes)
//   offset 2   u8       element type: 0x08 unsigned byte (the only one read here)
//   offset 3   u8       number of dimensions: 3 for images [N, rows, cols], 1 for labels [N]
//   offset 4   u32 × d  the extents
//   then       N·rows·cols (or N) bytes, row-major, nothing after them
// Either file may be gzip-compressed (.gz) or raw: zlib reads both.
#include <cstdint>
#include <string>

#include "wallfacer/core/tensor.h"

namespace wf::data {

struct ImageDataset {
  Tensor images;                  // [N, C, H, W] f32 in [-1, 1]
  Tensor labels;                  // [N] i64 in [0, num_classes)
  std::int64_t num_classes = 0;   // max label + 1
  std::string description;        // for logs and messages: the files (or seed) and the sizes
};

// The most u8 pixels an images file may hold (2 GiB): a header that claims more is refused before
// anything is allocated.
inline constexpr std::int64_t kIdxMaxPixelBytes = std::int64_t{1} << 31;
// The most f32 elements a resized data set may hold (8 GiB), and the largest resize.
inline constexpr std::int64_t kIdxMaxResizedElements = std::int64_t{1} << 31;
inline constexpr std::int64_t kIdxMaxResize = 4096;

// Reads an IDX images file ([N, rows, cols] u8) and its labels file ([N] u8). Pixel p becomes
// p / 127.5 - 1 (0 -> -1, 255 -> 1) in images [N, 1, rows, cols]; resize > 0 resizes every image
// to resize × resize (resize_bilinear). Every malformed input — a missing file, not IDX, another
// element type or rank, a zero or absurd extent, truncated or trailing data, a corrupt gzip
// stream, counts that differ between the two files — is a wf::UserError naming the file, the
// problem and the fix.
ImageDataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                              std::int64_t resize = 0);

// Bilinear resize of images [N, C, H, W] (f32) to [N, C, out_h, out_w] with PyTorch's
// F.interpolate(mode="bilinear", align_corners=False, antialias=False) sampling: output pixel
// (y, x) reads the input at ((y + 0.5)·H/out_h - 0.5, (x + 0.5)·W/out_w - 0.5), clamped below at
// 0, between its two neighbours on each axis. A same-size resize is a copy.
Tensor resize_bilinear(const Tensor& images, std::int64_t out_h, std::int64_t out_w);

// `n` seeded images [n, channels, size, size] in [-1, 1] for benchmarks and tests: each a sum of
// three smooth sinusoids whose integer frequencies depend on its class (and the seed), with
// per-image phases, so the classes differ in a way a conditional model can learn. Labels are
// uniform in [0, num_classes). Image i depends only on (seed, i): wf::uniform_at draws.
ImageDataset synthetic_images(std::int64_t n, std::int64_t channels, std::int64_t size, std::int64_t num_classes,
                              std::uint64_t seed);

}  // namespace wf::data
