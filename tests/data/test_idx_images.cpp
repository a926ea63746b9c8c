#include <catch2/catch.hpp>
#include <png.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "data/data_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/data/idx_images.h"
#include "wallfacer/data/png_grid.h"

using namespace wf::data;
using wf::Tensor;
using wf::data::testing::read_bytes;
using wf::data::testing::TempDir;
using wf::data::testing::write_bytes;
using wf::data::testing::write_gz;
using Catch::Matchers::Contains;

namespace {

// An IDX file: two zero bytes, the type code, the rank, big-endian u32 extents, the payload.
std::string idx(const std::vector<std::uint32_t>& dims, const std::string& payload, unsigned char type = 0x08) {
  std::string bytes = {'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (const std::uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>((d >> shift) & 0xff));
  }
  return bytes + payload;
}

std::string bytes_of(const std::vector<int>& values) {
  std::string out;
  for (const int v : values) out.push_back(static_cast<char>(v));
  return out;
}

float normalised(int p) { return static_cast<float>(p / 127.5 - 1.0); }

// The images tensor as one vector per plane, for comparisons that print well.
std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

// Naive bilinear resize (align_corners=False), written from the formula in double, one output
// pixel at a time: the reference resize_bilinear is tested against.
std::vector<double> naive_resize(const std::vector<double>& in, int h, int w, int out_h, int out_w) {
  auto source = [](int o, int in_size, int out_size) {
    if (in_size == out_size) return static_cast<double>(o);
    const double s = (o + 0.5) * in_size / out_size - 0.5;
    return s < 0 ? 0.0 : s;
  };
  std::vector<double> out;
  for (int y = 0; y < out_h; ++y) {
    for (int x = 0; x < out_w; ++x) {
      const double sy = source(y, h, out_h), sx = source(x, w, out_w);
      const int y0 = static_cast<int>(std::floor(sy)), x0 = static_cast<int>(std::floor(sx));
      const int y1 = std::min(y0 + 1, h - 1), x1 = std::min(x0 + 1, w - 1);
      const double fy = sy - y0, fx = sx - x0;
      auto at = [&](int yy, int xx) { return in[static_cast<std::size_t>(yy * w + xx)]; };
      out.push_back((1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x1)) + fy * ((1 - fx) * at(y1, x0) + fx * at(y1, x1)));
    }
  }
  return out;
}

// A PNG read back with libpng: its IHDR fields and its 8-bit pixels.
struct Png {
  std::uint32_t width = 0, height = 0;
  int bit_depth = 0, color_type = 0;
  std::vector<std::uint8_t> pixels;
};

Png read_png(const std::string& path, bool rgb) {
  const std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() > 33);
  REQUIRE(bytes.substr(0, 8) == "\x89PNG\r\n\x1a\n");
  Png png;
  const auto* ihdr = reinterpret_cast<const unsigned char*>(bytes.data()) + 16;  // after the signature and chunk header
  png.width = (std::uint32_t{ihdr[0]} << 24) | (std::uint32_t{ihdr[1]} << 16) | (std::uint32_t{ihdr[2]} << 8) | ihdr[3];
  png.height = (std::uint32_t{ihdr[4]} << 24) | (std::uint32_t{ihdr[5]} << 16) | (std::uint32_t{ihdr[6]} << 8) | ihdr[7];
  png.bit_depth = ihdr[8];
  png.color_type = ihdr[9];
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  REQUIRE(png_image_begin_read_from_file(&image, path.c_str()) != 0);
  image.format = rgb ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  png.pixels.resize(PNG_IMAGE_SIZE(image));
  REQUIRE(png_image_finish_read(&image, nullptr, png.pixels.data(), 0, nullptr) != 0);
  return png;
}

std::string fashion_mnist_dir() {
  const char* env = std::getenv("WF_FASHION_MNIST_DIR");
  return env != nullptr && *env != '\0' ? env : "/usr/share/datasets/fashion-mnist";
}

}  // namespace

TEST_CASE("IDX images load raw and gzipped, normalised to [-1, 1], with their labels", "[data][idx]") {
  TempDir dir;
  // Three 2×3 images; byte values at both ends and around the middle.
  const std::vector<int> pixels = {0, 255, 127, 128, 1, 254, 10, 20, 30, 40, 50, 60, 255, 255, 0, 0, 7, 200};
  const std::string images = idx({3, 2, 3}, bytes_of(pixels));
  const std::string labels = idx({3}, bytes_of({0, 4, 2}));
  write_bytes(dir.file("images"), images);
  write_bytes(dir.file("labels"), labels);
  write_gz(dir.file("images.gz"), images);
  write_gz(dir.file("labels.gz"), labels);

  for (const auto& [image_file, label_file] : std::vector<std::pair<std::string, std::string>>{
           {"images", "labels"}, {"images.gz", "labels.gz"}, {"images.gz", "labels"}}) {
    INFO(image_file << " + " << label_file);
    const ImageDataset set = load_idx_dataset(dir.file(image_file), dir.file(label_file));
    REQUIRE(set.images.shape() == wf::Shape{3, 1, 2, 3});
    CHECK(set.images.dtype() == wf::DType::f32);
    std::vector<float> expected;
    for (const int p : pixels) expected.push_back(normalised(p));
    CHECK(values(set.images) == expected);
    CHECK(set.images.at(0) == -1.0f);
    CHECK(set.images.at(1) == 1.0f);
    REQUIRE(set.labels.shape() == wf::Shape{3});
    CHECK(set.labels.dtype() == wf::DType::i64);
    CHECK(set.labels.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 4, 2});
    CHECK(set.num_classes == 5);
    CHECK_THAT(set.description, Contains(dir.file(image_file)) && Contains(dir.file(label_file)) &&
                                    Contains("3 images of 2×3") && Contains("5 classes"));
  }
}

TEST_CASE("resize_bilinear samples as PyTorch's F.interpolate(bilinear, align_corners=False)", "[data][idx]") {
  SECTION("2x2 -> 4x4, by hand") {
    // PyTorch gives exactly this for [[1, 2], [3, 4]]: sources -0.25 (clamped to 0), 0.25, 0.75,
    // 1.25 (the last index repeats) on each axis.
    const Tensor in = Tensor::from_vector<float>({1, 2, 3, 4}, {1, 1, 2, 2});
    const Tensor out = resize_bilinear(in, 4, 4);
    REQUIRE(out.shape() == wf::Shape{1, 1, 4, 4});
    const std::vector<float> expected = {1.0f, 1.25f, 1.75f, 2.0f, 1.5f, 1.75f, 2.25f, 2.5f,
                                         2.5f, 2.75f, 3.25f, 3.5f, 3.0f, 3.25f, 3.75f, 4.0f};
    CHECK(values(out) == expected);
  }
  SECTION("a constant image stays constant at any size") {
    for (const auto& [h, w, oh, ow] : std::vector<std::array<int, 4>>{{28, 28, 32, 32}, {28, 28, 64, 64},
                                                                     {28, 28, 13, 13}, {5, 3, 7, 2}, {1, 1, 4, 4}}) {
      const Tensor in = Tensor::full({2, 3, h, w}, 0.375);
      for (const float v : values(resize_bilinear(in, oh, ow))) REQUIRE(v == 0.375f);
    }
  }
  SECTION("random images against the naive formula, up and down, square and not") {
    std::mt19937 gen(3);
    std::uniform_real_distribution<double> pixel(-1.0, 1.0);
    for (const auto& [h, w, oh, ow] : std::vector<std::array<int, 4>>{
             {28, 28, 32, 32}, {28, 28, 64, 64}, {28, 28, 14, 14}, {28, 28, 9, 9}, {5, 3, 3, 7}, {1, 4, 4, 1},
             {6, 6, 6, 6}, {2, 7, 11, 7}}) {
      INFO(h << "x" << w << " -> " << oh << "x" << ow);
      std::vector<double> plane(static_cast<std::size_t>(h * w));
      for (double& v : plane) v = pixel(gen);
      const Tensor in = Tensor::from_vector(std::vector<float>(plane.begin(), plane.end()), {1, 1, h, w});
      const std::vector<float> got = values(resize_bilinear(in, oh, ow));
      const std::vector<double> want = naive_resize(std::vector<double>(plane.begin(), plane.end()), h, w, oh, ow);
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(want[i]).margin(1e-5));
    }
  }
  SECTION("each plane of a batch is resized on its own") {
    const Tensor in = Tensor::from_vector<float>({0, 0, 0, 0, 1, 1, 1, 1}, {2, 1, 2, 2});
    const Tensor out = resize_bilinear(in, 3, 3);
    for (std::int64_t i = 0; i < 9; ++i) {
      CHECK(out.at(i) == 0.0f);
      CHECK(out.at(9 + i) == 1.0f);
    }
  }
  SECTION("bad arguments") {
    const Tensor in = Tensor::zeros({1, 1, 2, 2});
    CHECK_THROWS_AS(resize_bilinear(in, 0, 4), wf::UserError);
    CHECK_THROWS_WITH(resize_bilinear(in, 4, 5000), Contains("from 1 to 4096"));
    CHECK_THROWS_WITH(resize_bilinear(Tensor::zeros({2, 2}), 4, 4), Contains("expected images [N, C, H, W]"));
  }
}

TEST_CASE("load_idx_dataset resizes every image when asked", "[data][idx]") {
  TempDir dir;
  // [[0, 255], [255, 0]] is [[-1, 1], [1, -1]]: bilinear to 4×4 is -1 + 2(fx + fy - 2 fx fy) with
  // fractions f = 0, 0.25, 0.75, 1 on each axis.
  write_gz(dir.file("images.gz"), idx({2, 2, 2}, bytes_of({0, 255, 255, 0, 51, 51, 51, 51})));
  write_gz(dir.file("labels.gz"), idx({2}, bytes_of({1, 1})));
  const ImageDataset set = load_idx_dataset(dir.file("images.gz"), dir.file("labels.gz"), 4);
  REQUIRE(set.images.shape() == wf::Shape{2, 1, 4, 4});
  const std::vector<float> first = {-1.0f,  -0.5f, 0.5f, 1.0f,   -0.5f, -0.25f, 0.25f, 0.5f,
                                    0.5f, 0.25f, -0.25f, -0.5f, 1.0f,  0.5f,   -0.5f, -1.0f};
  const std::vector<float> all = values(set.images);
  for (std::size_t i = 0; i < first.size(); ++i) CHECK(all[i] == Approx(first[i]).margin(1e-6));
  for (std::size_t i = 16; i < 32; ++i) CHECK(all[i] == normalised(51));  // constant stays constant
  CHECK(set.num_classes == 2);
  CHECK_THAT(set.description, Contains("resized to 4×4"));
  // The same as resizing the unresized load.
  const ImageDataset plain = load_idx_dataset(dir.file("images.gz"), dir.file("labels.gz"));
  CHECK(values(resize_bilinear(plain.images, 4, 4)) == all);
}

TEST_CASE("bad IDX files are wf::UserErrors that name the file, the problem and the fix", "[data][idx]") {
  TempDir dir;
  const std::string images = dir.file("images.idx"), labels = dir.file("labels.idx");
  const std::string good_images = idx({2, 2, 2}, bytes_of({1, 2, 3, 4, 5, 6, 7, 8}));
  const std::string good_labels = idx({2}, bytes_of({3, 1}));
  write_bytes(images, good_images);
  write_bytes(labels, good_labels);
  const std::string fix = "dataset-fashion-mnist";

  // Loading fails with a wf::UserError whose message names `path`, `problem` and (unless the
  // problem is between the two files) the fix.
  auto require_refused = [&](const std::string& path, const std::string& problem, bool names_fix = true) {
    try {
      load_idx_dataset(images, labels);
      FAIL("loading should have failed with '" << problem << "'");
    } catch (const wf::UserError& e) {
      INFO(e.what());
      CHECK_THAT(e.what(), Contains(path) && Contains(problem));
      if (names_fix) CHECK_THAT(e.what(), Contains(fix));
    }
  };

  SECTION("the files load as they are") { CHECK(load_idx_dataset(images, labels).num_classes == 4); }
  SECTION("a missing images file") {
    std::filesystem::remove(images);
    require_refused(images, "IDX images file '" + images + "': cannot open it: No such file or directory");
  }
  SECTION("a missing labels file") {
    std::filesystem::remove(labels);
    require_refused(labels, "IDX labels file '" + labels + "': cannot open it: No such file or directory");
  }
  SECTION("a directory") {
    std::filesystem::remove(images);
    std::filesystem::create_directories(images);
    require_refused(images, "is a directory, not an IDX file");
  }
  SECTION("a FIFO is refused at once, without waiting for a writer") {
    std::filesystem::remove(labels);
    REQUIRE(::mkfifo(labels.c_str(), 0600) == 0);
    require_refused(labels, "not a regular file");
  }
  SECTION("an empty file") {
    write_bytes(images, "");
    require_refused(images, "is empty");
  }
  SECTION("shorter than the magic") {
    write_bytes(labels, std::string("\0\0", 2));
    require_refused(labels, "too short to be an IDX file: 2 bytes");
  }
  SECTION("not IDX: text") {
    write_bytes(images, "P5 28 28 255\n");
    require_refused(images, "is not an IDX file: it starts with bytes 50 35 20 32, where an IDX images file starts "
                            "with 00 00 08 03");
  }
  SECTION("not IDX inside a gzip stream") {
    write_gz(images, "hello, world");
    require_refused(images, "is not an IDX file: it starts with bytes 68 65 6c 6c after gunzip");
  }
  SECTION("another element type") {
    write_bytes(images, idx({2, 2, 2}, std::string(32, '\0'), 0x0D));
    require_refused(images, "holds float32 elements (IDX type code 0x0d); only unsigned bytes (0x08)");
  }
  SECTION("the wrong number of dimensions") {
    write_bytes(images, idx({2, 8}, std::string(16, '\0')));
    require_refused(images, "has 2 dimensions where an IDX images file has 3 [N, rows, cols]");
  }
  SECTION("images and labels swapped") {
    write_bytes(images, good_labels);
    require_refused(images, "are the images and labels paths swapped?");
  }
  SECTION("a header cut short") {
    write_bytes(images, good_images.substr(0, 10));
    require_refused(images, "is truncated inside its header");
  }
  SECTION("an empty extent") {
    write_bytes(images, idx({2, 0, 2}, ""));
    require_refused(images, "has an empty extent: its header says [N, rows, cols] = [2, 0, 2]");
  }
  SECTION("an absurd size is refused from the header alone") {
    write_bytes(images, idx({4000000000u, 4000000000u, 4000000000u}, "xy"));
    require_refused(images, "more than the 2147483648 bytes (2 GiB) this reader loads at once");
  }
  SECTION("a header that promises far more than the file holds: truncated, without allocating it") {
    write_bytes(images, idx({2000000000u, 1, 1}, "0123456789"));
    write_bytes(labels, idx({2000000000u}, "0123456789"));
    require_refused(images, "is truncated: its header says [N, rows, cols] = [2000000000, 1, 1] (2000000000 bytes) "
                            "but only 10 bytes follow the header");
  }
  SECTION("truncated pixels, raw") {
    write_bytes(images, good_images.substr(0, good_images.size() - 1));
    require_refused(images, "is truncated: its header says [N, rows, cols] = [2, 2, 2] (8 bytes) but only 7 bytes");
  }
  SECTION("truncated labels, gzipped") {
    write_gz(labels, good_labels.substr(0, good_labels.size() - 1));
    require_refused(labels, "is truncated: its header says [N] = [2] (2 bytes) but only 1 bytes");
  }
  SECTION("a gzip file cut in half") {
    std::string big = idx({1, 64, 64}, std::string(64 * 64, '\0'));
    std::mt19937 gen(5);
    for (std::size_t i = 16; i < big.size(); ++i) big[i] = static_cast<char>(gen());  // incompressible
    write_gz(images, big);
    const std::string gz = read_bytes(images);
    write_bytes(images, gz.substr(0, gz.size() / 2));
    write_bytes(labels, idx({1}, bytes_of({0})));
    require_refused(images, "the gzip stream itself is cut short");
  }
  SECTION("a gzip file without its trailer: the data is all there, the checksum is not") {
    write_gz(images, good_images);
    const std::string gz = read_bytes(images);
    write_bytes(images, gz.substr(0, gz.size() - 8));
    require_refused(images, "the gzip stream ends before its checksum");
  }
  SECTION("a corrupt gzip stream: a bad checksum") {
    write_gz(images, good_images);
    std::string gz = read_bytes(images);
    gz[gz.size() - 8] = static_cast<char>(gz[gz.size() - 8] ^ 0x55);  // the CRC-32 in the trailer
    write_bytes(images, gz);
    require_refused(images, "is a corrupt gzip stream (incorrect data check)");
  }
  SECTION("a corrupt gzip stream: an unknown compression method") {
    write_bytes(images, std::string("\x1f\x8b\x07\x00\x00\x00\x00\x00\x00\x03garbage", 17));
    require_refused(images, "is a corrupt gzip stream (unknown compression method)");
  }
  SECTION("a gzip stream that ends inside the magic") {
    write_gz(images, good_images);
    write_bytes(images, read_bytes(images).substr(0, 12));
    require_refused(images, "is a truncated gzip stream: it ends after 1 bytes of data, before the end of the IDX magic");
  }
  SECTION("trailing bytes") {
    write_bytes(labels, good_labels + "abc");
    require_refused(labels, "is damaged: 3 bytes follow the 2 bytes its header [N] = [2] counts");
  }
  SECTION("trailing bytes inside a gzip stream") {
    write_gz(images, good_images + std::string(5, '\0'));
    require_refused(images, "is damaged: 5 bytes follow the 8 bytes");
  }
  SECTION("different counts of images and labels") {
    write_bytes(labels, idx({3}, bytes_of({0, 1, 2})));
    require_refused(images, "holds 2 images but IDX labels file '" + labels + "' holds 3 labels", false);
    require_refused(labels, "give the labels file of the same split", false);
  }
  SECTION("a negative resize") {
    CHECK_THROWS_AS(load_idx_dataset(images, labels, -1), wf::UserError);
    CHECK_THROWS_WITH(load_idx_dataset(images, labels, -1), Contains("resize -1 is out of range"));
  }
}

TEST_CASE("synthetic images: seeded, in [-1, 1], smooth patterns that depend on the class", "[data][idx]") {
  const ImageDataset set = synthetic_images(200, 3, 16, 10, 7);
  REQUIRE(set.images.shape() == wf::Shape{200, 3, 16, 16});
  REQUIRE(set.labels.shape() == wf::Shape{200});
  CHECK(set.num_classes == 10);
  CHECK_THAT(set.description, Contains("synthetic images") && Contains("seed 7"));
  const std::vector<float> pixels = values(set.images);
  for (const float v : pixels) REQUIRE((v >= -1.0f && v <= 1.0f));
  const std::vector<std::int64_t> labels = set.labels.to_vector<std::int64_t>();
  std::vector<int> per_class(10, 0);
  for (const std::int64_t l : labels) {
    REQUIRE((l >= 0 && l < 10));
    ++per_class[static_cast<std::size_t>(l)];
  }
  for (const int count : per_class) CHECK(count > 5);

  // Deterministic: the same arguments give the same images; image i does not depend on n.
  CHECK(values(synthetic_images(200, 3, 16, 10, 7).images) == pixels);
  const std::vector<float> prefix = values(synthetic_images(50, 3, 16, 10, 7).images);
  CHECK(std::equal(prefix.begin(), prefix.end(), pixels.begin()));
  CHECK(values(synthetic_images(200, 3, 16, 10, 8).images) != pixels);
  // The channels differ (colour), and one channel works too.
  CHECK(std::vector<float>(pixels.begin(), pixels.begin() + 256) !=
        std::vector<float>(pixels.begin() + 256, pixels.begin() + 512));
  CHECK(synthetic_images(4, 1, 8, 3, 1).images.shape() == wf::Shape{4, 1, 8, 8});

  // Each image carries its class's first wave, of frequency (1 + c mod 4, 1 + c / 4 mod 4) and
  // amplitude 1/3, alone at that frequency: its Fourier coefficient there has magnitude 1/6.
  // Sampled at pixel centres, integer frequencies below 8 are orthogonal on 16 pixels, so the
  // other waves add nothing.
  const int size = 16;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const std::int64_t c = labels[i];
    const double fx = 1 + c % 4, fy = 1 + (c / 4) % 4;
    double re = 0, im = 0;
    for (int y = 0; y < size; ++y) {
      for (int x = 0; x < size; ++x) {
        const double angle = 2 * std::numbers::pi * (fx * (x + 0.5) + fy * (y + 0.5)) / size;
        const double v = pixels[i * 3 * size * size + static_cast<std::size_t>(y * size + x)];
        re += v * std::cos(angle) / (size * size);
        im += v * std::sin(angle) / (size * size);
      }
    }
    INFO("image " << i << " class " << c);
    REQUIRE(std::hypot(re, im) == Approx(1.0 / 6).margin(1e-5));
  }

  CHECK_THROWS_AS(synthetic_images(0, 1, 8, 10, 1), wf::UserError);
  CHECK_THROWS_WITH(synthetic_images(4, 0, 8, 10, 1), Contains("must all be at least 1"));
  CHECK_THROWS_WITH(synthetic_images(1 << 20, 3, 1024, 10, 1), Contains("8 GiB"));
}

TEST_CASE("write_png_grid writes a grid PNG atomically", "[data][png]") {
  TempDir dir;
  const std::string path = dir.file("grid.png");

  SECTION("grayscale: size, padding, values, unused cells") {
    // Five 3×4 images: 3 columns (ceil(sqrt(5))) × 2 rows, padding 2: 3·(4+2)+2 = 20 wide,
    // 2·(3+2)+2 = 12 high.
    Tensor images = Tensor::full({5, 1, 3, 4}, 0.0);
    const std::vector<float> probe = {-1.0f, 1.0f, 0.0f, -0.5f, 2.0f, -3.0f, std::nanf(""), 0.5f};
    for (std::size_t i = 0; i < probe.size(); ++i) images.set(static_cast<std::int64_t>(i), probe[i]);
    images.set({4, 0, 2, 3}, 1.0);  // the last pixel of the last image
    write_png_grid(path, images);
    const Png png = read_png(path, false);
    CHECK(png.width == 20);
    CHECK(png.height == 12);
    CHECK(png.bit_depth == 8);
    CHECK(png.color_type == 0);  // grayscale
    auto at = [&](int y, int x) { return static_cast<int>(png.pixels[static_cast<std::size_t>(y * 20 + x)]); };
    // Image 0 starts at (2, 2); round((x + 1)·127.5), clamped, NaN black.
    const std::vector<int> expected = {0, 255, 128, 64, 255, 0, 0, 191};
    for (int i = 0; i < 8; ++i) CHECK(at(2 + i / 4, 2 + i % 4) == expected[static_cast<std::size_t>(i)]);
    CHECK(at(4, 2) == 128);                  // image 0, row 2: 0.0
    CHECK(at(0, 0) == 0);                    // padding is black
    CHECK(at(2, 6) == 0);                    // between images 0 and 1
    CHECK(at(2, 8) == 128);                  // image 1 starts at x = 2 + 6
    CHECK(at(7, 2) == 128);                  // image 3 starts at y = 2 + 5
    CHECK(at(7 + 2, 8 + 3) == 255);          // image 4's last pixel
    CHECK(at(7, 14) == 0);                   // the unused sixth cell
    CHECK(dir.entries() == std::vector<std::string>{"grid.png"});  // no temporary left behind
  }
  SECTION("RGB, chosen columns and padding, replacing an older file") {
    write_bytes(path, "old");
    Tensor images = Tensor::full({2, 3, 2, 2}, -1.0);
    images.set({0, 0, 0, 0}, 1.0);   // image 0, top left: red
    images.set({1, 2, 1, 1}, 1.0);   // image 1, bottom right: blue
    images.set({1, 1, 1, 1}, 0.0);   // ... and half green
    write_png_grid(path, images, 1, 1);
    const Png png = read_png(path, true);
    CHECK(png.width == 1 * (2 + 1) + 1);
    CHECK(png.height == 2 * (2 + 1) + 1);
    CHECK(png.color_type == 2);  // RGB
    auto rgb = [&](int y, int x) {
      const std::size_t i = static_cast<std::size_t>((y * 4 + x) * 3);
      return std::vector<int>{png.pixels[i], png.pixels[i + 1], png.pixels[i + 2]};
    };
    CHECK(rgb(1, 1) == std::vector<int>{255, 0, 0});
    CHECK(rgb(1, 2) == std::vector<int>{0, 0, 0});
    CHECK(rgb(5, 2) == std::vector<int>{0, 128, 255});  // image 1 at (4, 1), its pixel (1, 1)
    CHECK(dir.entries() == std::vector<std::string>{"grid.png"});
  }
  SECTION("bf16 images are converted") {
    write_png_grid(path, Tensor::full({1, 1, 2, 2}, 1.0, wf::DType::bf16), 0, 0);
    const Png png = read_png(path, false);
    CHECK(png.width == 2);
    CHECK(png.pixels == std::vector<std::uint8_t>{255, 255, 255, 255});
  }
  SECTION("a directory that does not exist, a parent that is a file, a path that is a directory") {
    const Tensor images = Tensor::zeros({1, 1, 2, 2});
    CHECK_THROWS_AS(write_png_grid(dir.file("no/such/dir/grid.png"), images), wf::UserError);
    CHECK_THROWS_WITH(write_png_grid(dir.file("no/such/dir/grid.png"), images),
                      Contains("the directory '" + dir.file("no/such/dir") + "' does not exist") &&
                          Contains("mkdir -p"));
    write_bytes(dir.file("plain"), "x");
    CHECK_THROWS_WITH(write_png_grid(dir.file("plain/grid.png"), images), Contains("is not a directory"));
    CHECK_THROWS_WITH(write_png_grid(dir.file(""), images), Contains("it is a directory"));
  }
  SECTION("bad images and arguments") {
    CHECK_THROWS_WITH(write_png_grid(path, Tensor::zeros({1, 2, 2, 2})), Contains("C = 1 (grayscale) or 3 (RGB)"));
    CHECK_THROWS_WITH(write_png_grid(path, Tensor::zeros({2, 2})), Contains("expected images [N, C, H, W]"));
    CHECK_THROWS_WITH(write_png_grid(path, Tensor::zeros({0, 1, 2, 2})), Contains("no pixels"));
    CHECK_THROWS_WITH(write_png_grid(path, Tensor::zeros({1, 1, 2, 2}), -1), Contains("must be >= 0"));
    CHECK_THROWS_WITH(write_png_grid(path, Tensor::zeros({1, 1, 2, 2}, wf::DType::i64)), Contains("floating-point"));
    CHECK_THROWS_WITH(write_png_grid(path, Tensor::zeros({2, 1, 2, 2}), std::int64_t{1} << 62), Contains("too large"));
    CHECK(dir.entries().empty());
  }
}

// Fashion-MNIST's test split from Debian's dataset-fashion-mnist. Hidden: CTest's
// data_fashion_mnist runs it where the package is installed and reports SKIPPED elsewhere
// (tests/CMakeLists.txt), so a run that gets here without the files fails.
TEST_CASE("Fashion-MNIST's t10k split loads: 10000 images of 28x28, 1000 per class", "[data][idx][.fashion_mnist]") {
  const std::string data = fashion_mnist_dir();
  const std::string images = data + "/t10k-images-idx3-ubyte.gz", labels = data + "/t10k-labels-idx1-ubyte.gz";
  if (!std::filesystem::exists(images) || !std::filesystem::exists(labels)) {
    FAIL("Fashion-MNIST not found in " << data << ": apt-get install dataset-fashion-mnist, or set WF_FASHION_MNIST_DIR");
  }
  const ImageDataset set = load_idx_dataset(images, labels);
  REQUIRE(set.images.shape() == wf::Shape{10000, 1, 28, 28});
  CHECK(set.num_classes == 10);
  const std::vector<std::int64_t> label = set.labels.to_vector<std::int64_t>();
  CHECK(std::vector<std::int64_t>(label.begin(), label.begin() + 6) == std::vector<std::int64_t>{9, 2, 1, 1, 6, 1});
  std::vector<int> per_class(10, 0);
  for (const std::int64_t l : label) ++per_class[static_cast<std::size_t>(l)];
  CHECK(per_class == std::vector<int>(10, 1000));
  const std::vector<float> pixels = values(set.images);
  CHECK(*std::min_element(pixels.begin(), pixels.end()) == -1.0f);
  CHECK(*std::max_element(pixels.begin(), pixels.end()) == 1.0f);
  // The first image's bytes sum to 33456 (Python's gzip module on the same file).
  double sum = 0;
  for (std::size_t i = 0; i < 784; ++i) sum += pixels[i];
  CHECK(sum == Approx(33456 / 127.5 - 784).margin(1e-3));

  const ImageDataset resized = load_idx_dataset(images, labels, 32);
  REQUIRE(resized.images.shape() == wf::Shape{10000, 1, 32, 32});
  CHECK(values(resized.images.slice0(0, 8)) == values(resize_bilinear(set.images.slice0(0, 8), 32, 32)));
  TempDir dir;
  write_png_grid(dir.file("t10k.png"), resized.images.slice0(0, 16));
  const Png png = read_png(dir.file("t10k.png"), false);
  CHECK(png.width == 4 * 34 + 2);
}
