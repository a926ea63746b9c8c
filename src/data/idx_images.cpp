#include "wallfacer/data/idx_images.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <vector>

#include "src/data/gzip_input.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/rng.h"

namespace wf::data {
namespace {

// What a file must be, for messages: the images file and the labels file differ in rank and in
// the file a user should give instead.
struct IdxRole {
  const char* what;     // "images" / "labels"
  int rank;             // dimensions in the header
  const char* layout;   // the extents, for messages
  const char* example;  // the Fashion-MNIST file of this kind
};
constexpr IdxRole kImagesRole{"images", 3, "[N, rows, cols]", "train-images-idx3-ubyte.gz"};
constexpr IdxRole kLabelsRole{"labels", 1, "[N]", "train-labels-idx1-ubyte.gz"};

constexpr unsigned char kIdxUnsignedByte = 0x08;
// The payload buffer grows by what has arrived so far (doubling), from 64 KiB up to 16 MiB a step:
// never by the header's word alone.
constexpr std::int64_t kFirstReadBytes = 1 << 16;
constexpr std::int64_t kMaxReadBytes = 1 << 24;
constexpr std::int64_t kMaxTrailingCount = 1 << 20;   // trailing bytes counted for the message, at most

std::string how_to_fix(const IdxRole& role) {
  return fmt::format("give an uncorrupted IDX {} file such as Fashion-MNIST's {} (Debian: apt-get install "
                     "dataset-fashion-mnist puts it in /usr/share/datasets/fashion-mnist/), or download it again",
                     role.what, role.example);
}

// An IDX file read through zlib (gzip or raw); every failure is a wf::UserError naming the file.
class IdxStream : public detail::GzipInput {
 public:
  IdxStream(const std::string& path, const IdxRole& role)
      : GzipInput(path, fmt::format("IDX {} file '{}'", role.what, path), "an IDX file", how_to_fix(role)),
        role_(role) {}
  const IdxRole& role() const { return role_; }

 private:
  IdxRole role_;
};

std::uint32_t big_endian_u32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}

const char* idx_type_name(unsigned char code) {
  switch (code) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "unknown";
  }
}

// The magic's four bytes: two zeros, the element type and the rank.
void check_magic(IdxStream& in, const unsigned char magic[4], std::int64_t got) {
  const IdxRole& role = in.role();
  const char* unpacked = in.gzipped() ? " after gunzip" : "";
  WF_USER_CHECK(got == 4 || !in.cut_short(), "{} is a truncated gzip stream: it ends after {} bytes of data, before "
                "the end of the IDX magic; {}", in.name(), got, how_to_fix(role));
  WF_USER_CHECK(got > 0, "{} is empty{}; {}", in.name(), unpacked, how_to_fix(role));
  WF_USER_CHECK(got == 4, "{} is too short to be an IDX file: {} bytes{}; {}", in.name(), got, unpacked,
                how_to_fix(role));
  WF_USER_CHECK(magic[0] == 0 && magic[1] == 0 && magic[2] != 0,
                "{} is not an IDX file: it starts with bytes {:02x} {:02x} {:02x} {:02x}{}, where an IDX {} file "
                "starts with 00 00 08 0{}; {}",
                in.name(), magic[0], magic[1], magic[2], magic[3], unpacked, role.what, role.rank, how_to_fix(role));
  WF_USER_CHECK(magic[2] == kIdxUnsignedByte,
                "{} holds {} elements (IDX type code 0x{:02x}); only unsigned bytes (0x08), as in MNIST and "
                "Fashion-MNIST, are supported; {}",
                in.name(), idx_type_name(magic[2]), magic[2], how_to_fix(role));
  if (magic[3] != role.rank) {
    // The two files of a pair have ranks 3 and 1: the other one's rank means they were swapped.
    const bool swapped = magic[3] == (role.rank == 3 ? 1 : 3);
    WF_USER_FAIL("{} has {} dimensions where an IDX {} file has {} {}{}; {}", in.name(), magic[3], role.what,
                 role.rank, role.layout,
                 swapped ? " (it looks like the other file of the pair: are the images and labels paths swapped?)"
                         : "",
                 how_to_fix(role));
  }
}

// Reads the magic and the extents; checks each extent is non-zero and that their product, the
// payload in bytes, is at most kIdxMaxPixelBytes (so it also fits in int64).
std::vector<std::int64_t> read_header(IdxStream& in) {
  unsigned char magic[4] = {};
  check_magic(in, magic, in.read(magic, 4));
  const IdxRole& role = in.role();
  std::array<unsigned char, 12> raw{};
  const std::int64_t want = 4 * role.rank;
  WF_USER_CHECK(in.read(raw.data(), want) == want, "{} is truncated inside its header (the {} extents {}); {}",
                in.name(), role.rank, role.layout, how_to_fix(role));
  std::vector<std::int64_t> dims(static_cast<std::size_t>(role.rank));
  for (std::size_t d = 0; d < dims.size(); ++d) dims[d] = big_endian_u32(raw.data() + 4 * d);
  WF_USER_CHECK(std::find(dims.begin(), dims.end(), 0) == dims.end(),
                "{} has an empty extent: its header says {} = {}, and every extent of an IDX {} file must be at "
                "least 1; {}",
                in.name(), role.layout, shape_str(dims), role.what, how_to_fix(role));
  std::int64_t bytes = 1;
  for (const std::int64_t d : dims) {
    WF_USER_CHECK(bytes <= kIdxMaxPixelBytes / d,
                  "{}: its header says {} = {}, more than the {} bytes (2 GiB) this reader loads at once: the "
                  "header is damaged, or the data set is too large; {}",
                  in.name(), role.layout, shape_str(dims), kIdxMaxPixelBytes, how_to_fix(role));
    bytes *= d;
  }
  return dims;
}

// Counts what follows the payload (at most kMaxTrailingCount bytes, for the message).
std::int64_t count_trailing(IdxStream& in) {
  std::array<unsigned char, 4096> sink{};
  std::int64_t trailing = 0;
  for (std::int64_t got = 1; got > 0 && trailing < kMaxTrailingCount; trailing += got) {
    got = in.read(sink.data(), static_cast<std::int64_t>(sink.size()));
  }
  return trailing;
}

// Reads exactly `bytes` bytes of payload and checks nothing follows. The buffer grows with the
// data that really arrives, so a header that promises more than the file holds never makes this
// allocate much more than the file's contents (at most twice them, or 64 KiB).
std::vector<std::uint8_t> read_payload(IdxStream& in, const std::vector<std::int64_t>& dims, std::int64_t bytes) {
  std::vector<std::uint8_t> data;
  std::int64_t have = 0;
  while (have < bytes) {
    const std::int64_t want = std::min(bytes - have, std::clamp(have, kFirstReadBytes, kMaxReadBytes));
    data.resize(static_cast<std::size_t>(have + want));
    const std::int64_t got = in.read(data.data() + have, want);
    have += got;
    if (got < want) break;
  }
  WF_USER_CHECK(have == bytes, "{} is truncated: its header says {} = {} ({} bytes) but only {} bytes follow the "
                "header{}; {}",
                in.name(), in.role().layout, shape_str(dims), bytes, have,
                in.cut_short() ? " (the gzip stream itself is cut short)" : "", how_to_fix(in.role()));
  const std::int64_t trailing = count_trailing(in);
  WF_USER_CHECK(!in.cut_short(), "{} is truncated: the gzip stream ends before its checksum (the data is complete, "
                "but the end of the .gz file is missing); {}", in.name(), how_to_fix(in.role()));
  WF_USER_CHECK(trailing == 0, "{} is damaged: {}{} bytes follow the {} bytes its header {} = {} counts (the header "
                "and the data disagree); {}",
                in.name(), trailing >= kMaxTrailingCount ? "at least " : "", trailing, bytes, in.role().layout,
                shape_str(dims), how_to_fix(in.role()));
  return data;
}

// p / 127.5 - 1 for every byte value, so 0 -> -1 and 255 -> 1 exactly.
std::array<float, 256> pixel_table() {
  std::array<float, 256> table{};
  for (int p = 0; p < 256; ++p) table[static_cast<std::size_t>(p)] = static_cast<float>(p / 127.5 - 1.0);
  return table;
}

Tensor normalised_images(const std::vector<std::uint8_t>& pixels, std::int64_t n, std::int64_t rows,
                         std::int64_t cols) {
  static const std::array<float, 256> table = pixel_table();
  Tensor images = Tensor::empty({n, 1, rows, cols}, DType::f32);
  float* out = images.data<float>();
  const auto count = static_cast<std::int64_t>(pixels.size());
#pragma omp parallel for schedule(static) if (count > 65536)
  for (std::int64_t i = 0; i < count; ++i) out[i] = table[pixels[static_cast<std::size_t>(i)]];
  return images;
}

Tensor labels_tensor(const std::vector<std::uint8_t>& labels) {
  Tensor out = Tensor::empty({static_cast<std::int64_t>(labels.size())}, DType::i64);
  std::copy(labels.begin(), labels.end(), out.data<std::int64_t>());
  return out;
}

// One output coordinate's two source neighbours and their weights along one axis.
struct Tap {
  std::int64_t i0, i1;
  float w0, w1;
};

// PyTorch's upsample_bilinear2d (align_corners=False) along one axis, in float as it computes:
// source = (o + 0.5)·in/out - 0.5 clamped below at 0; its floor and the next index (the last
// index repeats at the edge); the fraction is the weight of the second.
std::vector<Tap> bilinear_taps(std::int64_t in, std::int64_t out) {
  std::vector<Tap> taps(static_cast<std::size_t>(out));
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  for (std::int64_t o = 0; o < out; ++o) {
    Tap& tap = taps[static_cast<std::size_t>(o)];
    if (in == out) {
      tap = {o, o, 1.0f, 0.0f};
      continue;
    }
    const float source = std::max(scale * (static_cast<float>(o) + 0.5f) - 0.5f, 0.0f);
    tap.i0 = std::min(static_cast<std::int64_t>(source), in - 1);
    tap.i1 = tap.i0 + (tap.i0 < in - 1 ? 1 : 0);
    tap.w1 = std::clamp(source - static_cast<float>(tap.i0), 0.0f, 1.0f);
    tap.w0 = 1.0f - tap.w1;
  }
  return taps;
}

void resize_plane(const float* in, std::int64_t in_w, const std::vector<Tap>& rows, const std::vector<Tap>& cols,
                  float* out) {
  for (const Tap& r : rows) {
    const float* top = in + r.i0 * in_w;
    const float* bottom = in + r.i1 * in_w;
    for (const Tap& c : cols) {
      *out++ = r.w0 * (c.w0 * top[c.i0] + c.w1 * top[c.i1]) + r.w1 * (c.w0 * bottom[c.i0] + c.w1 * bottom[c.i1]);
    }
  }
}

void check_synthetic_args(std::int64_t n, std::int64_t channels, std::int64_t size, std::int64_t num_classes) {
  WF_USER_CHECK(n >= 1 && channels >= 1 && size >= 1 && num_classes >= 1,
                "synthetic_images: n ({}), channels ({}), size ({}) and num_classes ({}) must all be at least 1", n,
                channels, size, num_classes);
  const auto elements = checked_numel({n, channels, size, size});
  WF_USER_CHECK(elements && *elements <= kIdxMaxResizedElements,
                "synthetic_images: {} images of {}×{}×{} are more than {} elements (8 GiB of f32); make fewer or "
                "smaller ones",
                n, channels, size, size, kIdxMaxResizedElements);
}

// Integer frequencies (1..4 cycles across the image on each axis) of wave k of class c. Wave 0
// is (1 + c mod 4, 1 + (c / 4) mod 4), distinct for the first 16 classes; the others are drawn
// from the seed's class stream and moved off wave 0's, so that wave 0 alone sits at its frequency
// (tests find the class there).
std::array<double, 2> class_frequency(std::uint64_t seed, std::int64_t c, int k) {
  const std::array<std::int64_t, 2> first = {1 + c % 4, 1 + (c / 4) % 4};
  if (k == 0) return {static_cast<double>(first[0]), static_cast<double>(first[1])};
  const std::uint64_t class_seed = seed ^ 0x9e3779b97f4a7c15ULL;
  const auto index = static_cast<std::uint64_t>(c) * 8 + static_cast<std::uint64_t>(k) * 2;
  std::array<std::int64_t, 2> f = {1 + static_cast<std::int64_t>(4.0 * uniform_at(class_seed, index)),
                                   1 + static_cast<std::int64_t>(4.0 * uniform_at(class_seed, index + 1))};
  if (f == first) f[0] = 1 + f[0] % 4;
  return {static_cast<double>(f[0]), static_cast<double>(f[1])};
}

}  // namespace

Tensor resize_bilinear(const Tensor& images, std::int64_t out_h, std::int64_t out_w) {
  WF_CHECK(images.defined() && images.dim() == 4 && images.dtype() == DType::f32 && images.device().is_cpu(),
           "resize_bilinear: expected images [N, C, H, W] f32 on the CPU, got {}",
           images.defined() ? images.str() : std::string("an undefined tensor"));
  WF_USER_CHECK(out_h >= 1 && out_w >= 1 && out_h <= kIdxMaxResize && out_w <= kIdxMaxResize,
                "resize_bilinear: the output size {}×{} must be from 1 to {} on each side", out_h, out_w,
                kIdxMaxResize);
  const std::int64_t planes = images.size(0) * images.size(1);
  const std::int64_t in_h = images.size(2), in_w = images.size(3);
  const auto elements = checked_numel({planes, out_h, out_w});
  WF_USER_CHECK(elements && *elements <= kIdxMaxResizedElements,
                "resize_bilinear: {} images of {}×{} are more than {} elements (8 GiB of f32); resize to a smaller "
                "size or load fewer images",
                planes, out_h, out_w, kIdxMaxResizedElements);
  Tensor out = Tensor::empty({images.size(0), images.size(1), out_h, out_w}, DType::f32);
  const std::vector<Tap> rows = bilinear_taps(in_h, out_h), cols = bilinear_taps(in_w, out_w);
  const float* src = images.data<float>();
  float* dst = out.data<float>();
#pragma omp parallel for schedule(static) if (planes > 16)
  for (std::int64_t p = 0; p < planes; ++p) resize_plane(src + p * in_h * in_w, in_w, rows, cols, dst + p * out_h * out_w);
  return out;
}

ImageDataset load_idx_dataset(const std::string& images_path, const std::string& labels_path, std::int64_t resize) {
  WF_USER_CHECK(resize >= 0 && resize <= kIdxMaxResize,
                "load_idx_dataset: resize {} is out of range: 0 keeps the images' size, 1 to {} resizes them", resize,
                kIdxMaxResize);
  // Both headers first: a count mismatch is refused before megabytes of pixels are read.
  IdxStream images_in(images_path, kImagesRole);
  const std::vector<std::int64_t> dims = read_header(images_in);
  IdxStream labels_in(labels_path, kLabelsRole);
  const std::vector<std::int64_t> label_dims = read_header(labels_in);
  const std::int64_t n = dims[0], rows = dims[1], cols = dims[2];
  WF_USER_CHECK(label_dims[0] == n,
                "IDX images file '{}' holds {} images but IDX labels file '{}' holds {} labels: give the labels file "
                "of the same split (train-images with train-labels, t10k-images with t10k-labels)",
                images_path, n, labels_path, label_dims[0]);
  const auto resized = checked_numel({n, resize, resize});
  WF_USER_CHECK(resize == 0 || (resized && *resized <= kIdxMaxResizedElements),
                "IDX images file '{}': {} images resized to {}×{} are more than {} elements (8 GiB of f32); choose a "
                "smaller resize",
                images_path, n, resize, resize, kIdxMaxResizedElements);

  ImageDataset set;
  set.images = normalised_images(read_payload(images_in, dims, n * rows * cols), n, rows, cols);
  const std::vector<std::uint8_t> labels = read_payload(labels_in, label_dims, n);
  set.labels = labels_tensor(labels);
  set.num_classes = *std::max_element(labels.begin(), labels.end()) + std::int64_t{1};
  if (resize > 0) set.images = resize_bilinear(set.images, resize, resize);
  set.description = fmt::format("IDX images '{}' with labels '{}': {} images of {}×{}{}, {} classes", images_path,
                                labels_path, n, rows, cols,
                                resize > 0 ? fmt::format(" resized to {}×{}", resize, resize) : "", set.num_classes);
  return set;
}

ImageDataset synthetic_images(std::int64_t n, std::int64_t channels, std::int64_t size, std::int64_t num_classes,
                              std::uint64_t seed) {
  check_synthetic_args(n, channels, size, num_classes);
  constexpr int kWaves = 3;
  constexpr std::uint64_t kDrawsPerImage = 1 + kWaves;  // the label, then one phase per wave
  constexpr double kTwoPi = 2.0 * std::numbers::pi;
  ImageDataset set;
  set.images = Tensor::empty({n, channels, size, size}, DType::f32);
  set.labels = Tensor::empty({n}, DType::i64);
  float* pixels = set.images.data<float>();
  std::int64_t* labels = set.labels.data<std::int64_t>();
#pragma omp parallel for schedule(static) if (n > 16)
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t first = static_cast<std::uint64_t>(i) * kDrawsPerImage;
    const auto label = std::min(num_classes - 1, static_cast<std::int64_t>(uniform_at(seed, first) *
                                                                            static_cast<double>(num_classes)));
    labels[i] = label;
    std::array<std::array<double, 2>, kWaves> freq{};
    std::array<double, kWaves> phase{};
    for (int k = 0; k < kWaves; ++k) {
      freq[static_cast<std::size_t>(k)] = class_frequency(seed, label, k);
      phase[static_cast<std::size_t>(k)] = kTwoPi * uniform_at(seed, first + 1 + static_cast<std::uint64_t>(k));
    }
    float* image = pixels + i * channels * size * size;
    for (std::int64_t ch = 0; ch < channels; ++ch) {
      for (std::int64_t y = 0; y < size; ++y) {
        for (std::int64_t x = 0; x < size; ++x) {
          // Pixel centres in [0, 1): the same pattern at every resolution.
          const double u = (static_cast<double>(x) + 0.5) / static_cast<double>(size);
          const double v = (static_cast<double>(y) + 0.5) / static_cast<double>(size);
          double value = 0.0;
          for (std::size_t k = 0; k < kWaves; ++k) {
            // Each channel shifts each wave differently, so 3-channel images have colour.
            const double shift = static_cast<double>(ch) * static_cast<double>(k + 1) * kTwoPi / 3.0;
            value += std::sin(kTwoPi * (freq[k][0] * u + freq[k][1] * v) + phase[k] + shift) / kWaves;
          }
          *image++ = static_cast<float>(value);
        }
      }
    }
  }
  set.num_classes = num_classes;
  set.description = fmt::format("synthetic images (n {}, {}×{}×{}, {} classes, seed {})", n, channels, size, size,
                                num_classes, seed);
  return set;
}

}  // namespace wf::data
