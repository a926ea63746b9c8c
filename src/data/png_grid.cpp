#include "wallfacer/data/png_grid.h"

#include <png.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "src/core/atomic_file.h"
#include "wallfacer/core/error.h"

namespace wf::data {
namespace {

// PNG readers refuse wider or taller images by default (libpng's read limit is 10^6 pixels).
constexpr std::int64_t kMaxGridSide = 1000000;
constexpr std::int64_t kMaxGridBytes = std::int64_t{1} << 31;

struct GridLayout {
  std::int64_t n, channels, h, w;       // the images
  std::int64_t columns, rows, padding;  // the grid
  std::int64_t width, height;           // the PNG, in pixels
};

// a·b + c, or -1 when it overflows int64.
std::int64_t mul_add(std::int64_t a, std::int64_t b, std::int64_t c) {
  std::int64_t product = 0, sum = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(product, c, &sum)) return -1;
  return sum;
}

// The smallest c with c·c >= n: a square grid, or the nearest wider one.
std::int64_t square_columns(std::int64_t n) {
  auto c = static_cast<std::int64_t>(std::sqrt(static_cast<double>(n)));
  while (c * c < n) ++c;
  while (c > 1 && (c - 1) * (c - 1) >= n) --c;
  return c;
}

GridLayout grid_layout(const std::string& path, const Tensor& images, std::int64_t columns, std::int64_t padding) {
  WF_USER_CHECK(images.defined() && images.dim() == 4 && (images.size(1) == 1 || images.size(1) == 3),
                "write_png_grid '{}': expected images [N, C, H, W] with C = 1 (grayscale) or 3 (RGB), got {}", path,
                images.defined() ? shape_str(images.shape()) : std::string("an undefined tensor"));
  WF_USER_CHECK(is_floating(images.dtype()), "write_png_grid '{}': expected floating-point images in [-1, 1], got {}",
                path, dtype_name(images.dtype()));
  GridLayout g{images.size(0), images.size(1), images.size(2), images.size(3), columns, 0, padding, 0, 0};
  WF_USER_CHECK(g.n >= 1 && g.h >= 1 && g.w >= 1, "write_png_grid '{}': no pixels to draw in images {}", path,
                shape_str(images.shape()));
  WF_USER_CHECK(columns >= 0 && padding >= 0, "write_png_grid '{}': columns ({}) and padding ({}) must be >= 0", path,
                columns, padding);
  if (g.columns == 0) g.columns = square_columns(g.n);
  g.rows = (g.n + g.columns - 1) / g.columns;
  g.width = mul_add(g.columns, g.w + padding, padding);
  g.height = mul_add(g.rows, g.h + padding, padding);
  const bool fits = g.width > 0 && g.height > 0 && g.width <= kMaxGridSide && g.height <= kMaxGridSide &&
                    g.width * g.height <= kMaxGridBytes / g.channels;
  WF_USER_CHECK(fits,
                "write_png_grid '{}': a grid of {} columns × {} rows of {}×{} images with padding {} is too large for "
                "a PNG (at most {} pixels a side, {} bytes); write fewer or smaller images",
                path, g.columns, g.rows, g.h, g.w, padding, kMaxGridSide, kMaxGridBytes);
  return g;
}

// round((clamp(x, -1, 1) + 1) · 127.5); NaN is black.
std::uint8_t to_byte(float x) {
  if (std::isnan(x)) return 0;
  return static_cast<std::uint8_t>(std::lround((std::clamp(x, -1.0f, 1.0f) + 1.0f) * 127.5f));
}

// The grid's interleaved 8-bit pixels (row after row, channels innermost), padding black.
std::vector<std::uint8_t> grid_pixels(const GridLayout& g, const float* images) {
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(g.width * g.height * g.channels), 0);
  const std::int64_t plane = g.h * g.w;
  for (std::int64_t i = 0; i < g.n; ++i) {
    const std::int64_t top = g.padding + (i / g.columns) * (g.h + g.padding);
    const std::int64_t left = g.padding + (i % g.columns) * (g.w + g.padding);
    const float* image = images + i * g.channels * plane;
    for (std::int64_t y = 0; y < g.h; ++y) {
      std::uint8_t* row = pixels.data() + ((top + y) * g.width + left) * g.channels;
      for (std::int64_t x = 0; x < g.w; ++x) {
        for (std::int64_t c = 0; c < g.channels; ++c) row[x * g.channels + c] = to_byte(image[c * plane + y * g.w + x]);
      }
    }
  }
  return pixels;
}

// Encodes with libpng's simplified API, which reports errors by return value (no longjmp
// through C++ frames).
std::vector<unsigned char> encode_png(const std::string& path, const GridLayout& g,
                                      const std::vector<std::uint8_t>& pixels) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(g.width);
  image.height = static_cast<png_uint_32>(g.height);
  image.format = g.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t bytes = 0;
  const bool sized = png_image_write_get_memory_size(image, bytes, 0, pixels.data(), 0, nullptr) != 0;
  std::vector<unsigned char> png(bytes);
  const bool written = sized && png_image_write_to_memory(&image, png.data(), &bytes, 0, pixels.data(), 0, nullptr) != 0;
  const std::string message = image.message;
  png_image_free(&image);
  WF_CHECK(written, "write_png_grid '{}': libpng cannot encode the {}×{} grid: {}", path, g.width, g.height, message);
  png.resize(bytes);
  return png;
}

// A clear wf::UserError, before any work, when the PNG's directory cannot take a new file.
void check_directory(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).parent_path();
  const fs::path dir = parent.empty() ? fs::path(".") : parent;
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  WF_USER_CHECK(fs::exists(status), "write_png_grid: cannot write '{}': the directory '{}' does not exist; create it "
                "(mkdir -p {}) or write the grid elsewhere", path, dir.string(), dir.string());
  WF_USER_CHECK(fs::is_directory(status), "write_png_grid: cannot write '{}': '{}' is not a directory; write the "
                "grid into a directory", path, dir.string());
  WF_USER_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, "write_png_grid: cannot write '{}': the directory '{}' is "
                "not writable: {}; fix its permissions or write the grid elsewhere", path, dir.string(),
                wf::detail::errno_text());
  WF_USER_CHECK(!fs::is_directory(fs::status(path, ec)), "write_png_grid: cannot write '{}': it is a directory; give "
                "a file name such as {}/samples.png", path, path);
}

}  // namespace

void write_png_grid(const std::string& path, const Tensor& images, std::int64_t columns, std::int64_t padding) {
  const GridLayout g = grid_layout(path, images, columns, padding);
  check_directory(path);
  Tensor host = images.device().is_cpu() ? images : images.to(Device::cpu());
  host = host.to(DType::f32);
  const std::vector<unsigned char> png = encode_png(path, g, grid_pixels(g, host.data<float>()));
  wf::detail::AtomicFile file(path, "write_png_grid");
  file.write(png.data(), png.size());
  file.commit();
}

}  // namespace wf::data
