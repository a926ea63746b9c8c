// Document indexes (data/document_index.h): the binary layout, written atomically, read with
// every field checked before it is trusted.
#include "wallfacer/data/document_index.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "src/core/atomic_file.h"
#include "src/data/little_endian.h"
#include "wallfacer/core/error.h"

namespace wf::data {
namespace {

using detail::get;
using detail::put;

constexpr const char* kHowToFix = "re-run `wallfacer prepare-text`, which writes the token file and its index together";

}  // namespace

std::string document_index_path(const std::string& token_path) {
  return std::filesystem::path(token_path).replace_extension(".docs").string();
}

void check_document_index(const DocumentIndex& index, const std::string& what) {
  const std::int64_t D = index.documents();
  WF_CHECK(index.token_count >= 0, "{}: token count {} is negative; {}", what, index.token_count, kHowToFix);
  WF_CHECK((D == 0) == (index.token_count == 0),
           "{}: {} documents for {} tokens (only an empty token file has none); {}", what, D, index.token_count,
           kHowToFix);
  WF_CHECK(!index.end_of_text.has_value() || *index.end_of_text != kNoEndOfText,
           "{}: end-of-text token {:#x} is the value that means 'none'", what, kNoEndOfText);
  for (std::int64_t d = 0; d < D; ++d) {
    const std::int64_t start = index.starts[static_cast<std::size_t>(d)];
    const std::int64_t previous = d == 0 ? -1 : index.starts[static_cast<std::size_t>(d - 1)];
    WF_CHECK(d > 0 || start == 0, "{}: the first document starts at token {}, not 0; {}", what, start, kHowToFix);
    WF_CHECK(start > previous && start < index.token_count,
             "{}: document {} starts at token {}, which is not after document {}'s start ({}) and before the end ({} "
             "tokens); {}",
             what, d, start, d - 1, previous, index.token_count, kHowToFix);
  }
}

void write_document_index(const std::string& path, const DocumentIndex& index) {
  check_document_index(index, fmt::format("write_document_index '{}'", path));
  std::vector<unsigned char> bytes(static_cast<std::size_t>(kDocumentIndexHeaderBytes + 8 * index.documents()));
  std::memcpy(bytes.data(), kDocumentIndexMagic, sizeof(kDocumentIndexMagic));
  put(bytes.data() + 8, kDocumentIndexVersion);
  put(bytes.data() + 12, index.end_of_text.value_or(kNoEndOfText));
  put(bytes.data() + 16, static_cast<std::uint64_t>(index.token_count));
  put(bytes.data() + 24, static_cast<std::uint64_t>(index.documents()));
  unsigned char* at = bytes.data() + kDocumentIndexHeaderBytes;
  for (const std::int64_t start : index.starts) {
    put(at, static_cast<std::uint64_t>(start));
    at += 8;
  }
  wf::detail::write_file_atomically(path, {{bytes.data(), bytes.size()}}, "write_document_index");
}

DocumentIndex read_document_index(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  WF_CHECK(fs::exists(status), "document index '{}' does not exist; {}", path, kHowToFix);
  WF_CHECK(fs::is_regular_file(status), "document index '{}' is not a regular file; {}", path, kHowToFix);
  const auto file_bytes = static_cast<std::int64_t>(fs::file_size(path, ec));
  WF_CHECK(!ec, "document index '{}': cannot read its size: {}", path, ec.message());
  WF_CHECK(file_bytes >= kDocumentIndexHeaderBytes,
           "document index '{}' is truncated: {} bytes, shorter than its {}-byte header; {}", path, file_bytes,
           kDocumentIndexHeaderBytes, kHowToFix);
  std::ifstream in(path, std::ios::binary);
  WF_CHECK(in.good(), "document index '{}': cannot open it (check its permissions)", path);
  unsigned char header[kDocumentIndexHeaderBytes];
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  WF_CHECK(in.good(), "document index '{}': reading its header failed", path);
  WF_CHECK(std::memcmp(header, kDocumentIndexMagic, sizeof(kDocumentIndexMagic)) == 0,
           "document index '{}' has the wrong magic (expected \"WFDOCIDX\"): it is not a wallfacer document index; {}",
           path, kHowToFix);
  const auto version = get<std::uint32_t>(header + 8);
  WF_CHECK(version == kDocumentIndexVersion,
           "document index '{}' has unknown format version {} (this build reads version {}); {}", path, version,
           kDocumentIndexVersion, kHowToFix);
  const auto end_of_text = get<std::uint32_t>(header + 12);
  const auto token_count = get<std::uint64_t>(header + 16);
  const auto count = get<std::uint64_t>(header + 24);
  const auto payload = static_cast<std::uint64_t>(file_bytes - kDocumentIndexHeaderBytes);
  // Compared before anything is allocated: a damaged count must not ask for terabytes.
  WF_CHECK(count <= payload / 8,
           "document index '{}' is truncated: its header says {} documents but only {} bytes follow the header "
           "(room for {}); {}",
           path, count, payload, payload / 8, kHowToFix);
  WF_CHECK(count * 8 == payload,
           "document index '{}' is damaged: {} bytes follow its {} document starts (the header and the file size "
           "disagree); {}",
           path, payload - count * 8, count, kHowToFix);
  WF_CHECK(token_count <= static_cast<std::uint64_t>(INT64_MAX), "document index '{}': token count {} is too large; {}",
           path, token_count, kHowToFix);
  DocumentIndex index;
  index.token_count = static_cast<std::int64_t>(token_count);
  if (end_of_text != kNoEndOfText) index.end_of_text = end_of_text;
  std::vector<unsigned char> bytes(static_cast<std::size_t>(payload));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  WF_CHECK(in.gcount() == static_cast<std::streamsize>(bytes.size()),
           "document index '{}' shrank while it was read; {}", path, kHowToFix);
  index.starts.resize(static_cast<std::size_t>(count));
  for (std::size_t d = 0; d < index.starts.size(); ++d) {
    const auto start = get<std::uint64_t>(bytes.data() + 8 * d);
    // Larger than any token count: check_document_index reports it (as a negative start would wrap).
    index.starts[d] = start > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(start);
  }
  check_document_index(index, fmt::format("document index '{}'", path));
  return index;
}

}  // namespace wf::data
