#include "wallfacer/train/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "src/core/atomic_file.h"
#include "src/train/json_limits.h"
#include "src/train/safetensors_encode.h"
#include "wallfacer/core/error.h"

namespace wf::train {
namespace {

// The data section is the host's memory image of each tensor, which is the file's order only here.
static_assert(std::endian::native == std::endian::little, "safetensors files are little-endian");

using Json = nlohmann::ordered_json;  // keeps the header in the order it was written

constexpr const char* kMetadataKey = "__metadata__";
// The reference implementation refuses headers above 100 MB; so do we, before allocating.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr std::array<DTypeName, 7> kDTypeNames = {{{DType::f32, "F32"},
                                                   {DType::f64, "F64"},
                                                   {DType::bf16, "BF16"},
                                                   {DType::f16, "F16"},
                                                   {DType::i32, "I32"},
                                                   {DType::i64, "I64"},
                                                   {DType::u8, "U8"}}};

const char* safetensors_dtype(DType dtype) {
  for (const auto& entry : kDTypeNames) {
    if (entry.dtype == dtype) return entry.name;
  }
  WF_FAIL("safetensors: dtype {} has no safetensors name", dtype_name(dtype));
}

DType parse_safetensors_dtype(const std::string& name, const std::string& tensor, const std::string& path) {
  for (const auto& entry : kDTypeNames) {
    if (name == entry.name) return entry.dtype;
  }
  WF_FAIL("safetensors file '{}': tensor '{}' has unknown dtype '{}' (supported: F32, F64, BF16, F16, I32, I64, U8)",
          path, tensor, name);
}

// JSON text of the header; nlohmann refuses invalid UTF-8, which we turn into an error that says
// which names or values to fix.
std::string dump_header(const Json& header, const std::string& path) {
  try {
    return header.dump();
  } catch (const Json::exception& e) {
    WF_FAIL("cannot write safetensors file '{}': tensor names and metadata must be valid UTF-8 ({})", path, e.what());
  }
}

// Reads exactly `size` bytes at `offset`; false when the file ends first.
bool read_at(int fd, void* out, std::size_t size, std::uint64_t offset, const std::string& path) {
  auto* bytes = static_cast<unsigned char*>(out);
  while (size > 0) {
    const ssize_t got = ::pread(fd, bytes, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    WF_CHECK(got >= 0, "safetensors file '{}': read failed: {}", path, wf::detail::errno_text());
    if (got == 0) return false;
    bytes += got;
    size -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
  return true;
}

// One tensor's entry of the header, checked against the data section of `data_bytes`.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin;
  std::uint64_t end;
};

std::uint64_t json_u64(const Json& value, const std::string& what, const std::string& path) {
  WF_CHECK(value.is_number_unsigned() || (value.is_number_integer() && value.get<std::int64_t>() >= 0),
           "safetensors file '{}': {} must be a non-negative integer, not {}", path, what, value.dump());
  return value.get<std::uint64_t>();
}

Entry parse_entry(const std::string& name, const Json& info, std::uint64_t data_bytes, const std::string& path) {
  WF_CHECK(info.is_object() && info.contains("dtype") && info.contains("shape") && info.contains("data_offsets"),
           "safetensors file '{}': the header entry of tensor '{}' must be an object with dtype, shape and "
           "data_offsets, not {}",
           path, name, info.dump());
  WF_CHECK(info["dtype"].is_string(), "safetensors file '{}': tensor '{}' has a dtype that is not a string: {}", path,
           name, info["dtype"].dump());
  Entry entry{name, parse_safetensors_dtype(info["dtype"].get<std::string>(), name, path), {}, 0, 0};

  const Json& shape = info["shape"];
  WF_CHECK(shape.is_array(), "safetensors file '{}': tensor '{}' has a shape that is not an array: {}", path, name,
           shape.dump());
  // Products past 2^60 elements (2^63 bytes) are corrupt anyway; stopping there avoids overflow.
  std::uint64_t numel = 1;
  bool overflow = false;
  for (const Json& extent : shape) {
    const std::uint64_t n = json_u64(extent, fmt::format("each extent of tensor '{}'", name), path);
    entry.shape.push_back(static_cast<std::int64_t>(std::min<std::uint64_t>(n, INT64_MAX)));
    overflow = overflow || (n != 0 && numel > (std::uint64_t{1} << 60) / n);
    numel *= n;
  }
  const Json& offsets = info["data_offsets"];
  WF_CHECK(offsets.is_array() && offsets.size() == 2,
           "safetensors file '{}': tensor '{}' needs data_offsets [begin, end], not {}", path, name, offsets.dump());
  entry.begin = json_u64(offsets[0], fmt::format("data_offsets of tensor '{}'", name), path);
  entry.end = json_u64(offsets[1], fmt::format("data_offsets of tensor '{}'", name), path);
  WF_CHECK(entry.begin <= entry.end, "safetensors file '{}': tensor '{}' has data_offsets [{}, {}] that end before "
           "they begin", path, name, entry.begin, entry.end);
  // Named by the header's own text: after an overflow the product would be a wrong number.
  WF_CHECK(!overflow, "safetensors file '{}': tensor '{}' has shape {}, more than 2^60 elements: the header is corrupt",
           path, name, shape.dump());
  const std::uint64_t expected = numel * dtype_size(entry.dtype);
  WF_CHECK(entry.end - entry.begin == expected,
           "safetensors file '{}': tensor '{}' of shape {} and dtype {} needs {} bytes but its data_offsets [{}, {}] "
           "span {}: the shape and the offsets are inconsistent",
           path, name, shape_str(entry.shape), info["dtype"].get<std::string>(), expected, entry.begin, entry.end,
           entry.end - entry.begin);
  WF_CHECK(entry.end <= data_bytes,
           "safetensors file '{}' is truncated: tensor '{}' ends at data offset {} but the file holds only {} data "
           "bytes",
           path, name, entry.end, data_bytes);
  return entry;
}

std::map<std::string, std::string> parse_metadata(const Json& metadata, const std::string& path) {
  WF_CHECK(metadata.is_object(), "safetensors file '{}': {} must be an object of strings, not {}", path, kMetadataKey,
           metadata.dump());
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : metadata.items()) {
    WF_CHECK(value.is_string(), "safetensors file '{}': {} value of '{}' must be a string, not {}", path, kMetadataKey,
             key, value.dump());
    out[key] = value.get<std::string>();
  }
  return out;
}

}  // namespace

namespace detail {

std::vector<wf::detail::ByteRange> SafetensorsImage::pieces() const {
  std::vector<wf::detail::ByteRange> out{{prefix.data(), prefix.size()}};
  for (const Tensor& t : tensors) out.push_back({t.raw_data(), t.nbytes()});
  return out;
}

std::uint64_t SafetensorsImage::size() const {
  std::uint64_t total = prefix.size();
  for (const Tensor& t : tensors) total += t.nbytes();
  return total;
}

SafetensorsImage encode_safetensors(const nn::StateDict& tensors, const std::map<std::string, std::string>& metadata,
                                    const std::string& path) {
  SafetensorsImage image;
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[kMetadataKey] = std::move(meta);
  }
  // The header lists the tensors in StateDict order; the data holds them by element size,
  // largest first (as the reference writer does), so that with the data section 8-byte aligned
  // every tensor is aligned for its dtype: PyTorch's loaders view the bytes as the dtype in place
  // and refuse misaligned offsets.
  std::vector<const nn::StateDict::Entry*> data_order;
  for (const auto& entry : tensors) {
    const auto& [name, tensor] = entry;
    WF_CHECK(name != kMetadataKey, "cannot write safetensors file '{}': '{}' is reserved and cannot name a tensor",
             path, name);
    WF_CHECK(tensor.device().is_cpu(), "cannot write safetensors file '{}': tensor '{}' is on {}; move it to the cpu "
             "first", path, name, tensor.device().str());
    header[name] = Json::object();  // placeholder that fixes the header order
    data_order.push_back(&entry);
  }
  std::stable_sort(data_order.begin(), data_order.end(), [](const auto* a, const auto* b) {
    return dtype_size(a->second.dtype()) > dtype_size(b->second.dtype());
  });
  std::uint64_t offset = 0;
  for (const auto* entry : data_order) {
    const auto& [name, tensor] = *entry;
    const std::uint64_t end = offset + tensor.nbytes();
    header[name] = Json{{"dtype", safetensors_dtype(tensor.dtype())}, {"shape", tensor.shape()},
                        {"data_offsets", {offset, end}}};
    offset = end;
    image.tensors.push_back(tensor);
  }
  std::string json = dump_header(header, path);
  json.append((8 - json.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  const std::uint64_t length = json.size();
  image.prefix.resize(8);
  std::memcpy(image.prefix.data(), &length, 8);
  image.prefix += json;
  return image;
}

}  // namespace detail

void save_safetensors(const std::string& path, const nn::StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const detail::SafetensorsImage image = detail::encode_safetensors(tensors, metadata, path);
  wf::detail::write_file_atomically(path, image.pieces(), "save_safetensors");
}

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  WF_CHECK(fd_ >= 0, "cannot open safetensors file '{}': {}", path_, wf::detail::errno_text());
  try {
    parse_header();
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() { ::close(fd_); }

void SafetensorsReader::parse_header() {
  const std::string& path = path_;
  struct stat st {};
  WF_CHECK(::fstat(fd_, &st) == 0, "cannot stat safetensors file '{}': {}", path, wf::detail::errno_text());
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  WF_CHECK(file_bytes >= 8,
           "safetensors file '{}' is truncated: {} bytes, shorter than the 8-byte header length that starts it", path,
           file_bytes);
  std::uint64_t header_bytes = 0;
  WF_CHECK(read_at(fd_, &header_bytes, 8, 0, path), "safetensors file '{}' is truncated", path);
  WF_CHECK(header_bytes <= file_bytes - 8,
           "safetensors file '{}' is truncated or not a safetensors file: its header length {} reaches beyond the "
           "file ({} bytes)",
           path, header_bytes, file_bytes);
  WF_CHECK(header_bytes <= kMaxHeaderBytes, "safetensors file '{}': header length {} is above the limit of {} bytes",
           path, header_bytes, kMaxHeaderBytes);
  std::string text(header_bytes, '\0');
  WF_CHECK(read_at(fd_, text.data(), text.size(), 8, path), "safetensors file '{}' is truncated", path);
  Json header;
  try {
    header = detail::parse_bounded_json(text, fmt::format("safetensors file '{}': the header", path));
  } catch (const Json::exception& e) {
    WF_FAIL("safetensors file '{}' has an invalid JSON header ({}): the file is corrupt or not a safetensors file",
            path, e.what());
  }
  WF_CHECK(header.is_object(), "safetensors file '{}': the header must be a JSON object, not {}", path,
           header.type_name());

  const std::uint64_t data_start = 8 + header_bytes;
  const std::uint64_t data_bytes = file_bytes - data_start;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == kMetadataKey) {
      metadata_ = parse_metadata(info, path);
    } else {
      entries.push_back(parse_entry(name, info, data_bytes, path));
    }
  }
  // Tensors tile the data section with no gap, overlap or trailing bytes, as the reference
  // implementation requires.
  std::vector<const Entry*> by_offset;
  for (const Entry& entry : entries) by_offset.push_back(&entry);
  // Empty tensors sit at any offset: (begin, end) order puts them before a tensor starting there.
  std::stable_sort(by_offset.begin(), by_offset.end(),
                   [](const Entry* a, const Entry* b) { return std::pair(a->begin, a->end) < std::pair(b->begin, b->end); });
  std::uint64_t expected_begin = 0;
  for (const Entry* e : by_offset) {
    const Entry& entry = *e;
    WF_CHECK(entry.begin == expected_begin,
             "safetensors file '{}': tensor '{}' starts at data offset {} where {} was expected: the tensors must "
             "follow one another without gaps or overlaps",
             path, entry.name, entry.begin, expected_begin);
    expected_begin = entry.end;
  }
  WF_CHECK(expected_begin == data_bytes,
           "safetensors file '{}': the tensors cover {} data bytes but the file holds {}: the file is corrupt", path,
           expected_begin, data_bytes);
  for (const Entry& entry : entries) {
    entries_.push_back({entry.name, entry.dtype, entry.shape, data_start + entry.begin, entry.end - entry.begin});
  }
}

const SafetensorsEntry* SafetensorsReader::find(std::string_view name) const {
  for (const SafetensorsEntry& entry : entries_) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

void SafetensorsReader::read(const SafetensorsEntry& entry, std::uint64_t offset, std::uint64_t size,
                             void* out) const {
  WF_CHECK(offset <= entry.bytes && size <= entry.bytes - offset,
           "safetensors file '{}': bytes [{}, {}) lie outside tensor '{}' ({} bytes)", path_, offset, offset + size,
           entry.name, entry.bytes);
  WF_CHECK(read_at(fd_, out, size, entry.offset + offset, path_),
           "safetensors file '{}' is truncated while reading tensor '{}'", path_, entry.name);
}

SafetensorsContents load_safetensors(const std::string& path) {
  const SafetensorsReader reader(path);
  SafetensorsContents contents;
  contents.metadata = reader.metadata();
  for (const SafetensorsEntry& entry : reader.entries()) {
    Tensor tensor = Tensor::empty(entry.shape, entry.dtype);
    reader.read(entry, 0, entry.bytes, tensor.raw_data());
    contents.tensors.insert(entry.name, std::move(tensor));
  }
  return contents;
}

}  // namespace wf::train
