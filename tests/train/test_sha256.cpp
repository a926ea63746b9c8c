#include <catch2/catch.hpp>

#include <string>

#include "data/data_testing.h"
#include "src/train/sha256.h"  // internal: the checkpoint checksum

using wf::train::detail::Sha256;
using wf::train::detail::sha256_file_hex;
using wf::train::detail::sha256_hex;

TEST_CASE("SHA-256 matches the FIPS 180-4 test vectors", "[train][sha256]") {
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a': many blocks, and the length field past 2^20 bits.
  CHECK(sha256_hex(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("SHA-256 gives the same digest however the input is split", "[train][sha256]") {
  std::string text;
  for (int i = 0; i < 1000; ++i) text.push_back(static_cast<char>(i * 31 + 7));
  const std::string whole = sha256_hex(text);
  for (const std::size_t piece : {std::size_t{1}, std::size_t{55}, std::size_t{63}, std::size_t{64}, std::size_t{65},
                                  std::size_t{200}}) {
    Sha256 hash;
    for (std::size_t at = 0; at < text.size(); at += piece) hash.update(std::string_view(text).substr(at, piece));
    CHECK(hash.hex_digest() == whole);
  }
  wf::data::testing::TempDir dir;
  wf::data::testing::write_bytes(dir.file("f"), text);
  CHECK(sha256_file_hex(dir.file("f")) == whole);
  CHECK_THROWS_WITH(sha256_file_hex(dir.file("missing")), Catch::Matchers::Contains(dir.file("missing")));
}
