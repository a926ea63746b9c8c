// Documents for prepare-text: the JSON Lines record reader, text files and separators, folders,
// gzip, bad records by file and line and their limit, the document index and its errors, and
// prepare_text's token files (end-of-text after each document, validation documents whole).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "data/data_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/data/document_index.h"
#include "wallfacer/data/documents.h"
#include "wallfacer/data/gpt2_tokenizer.h"
#include "wallfacer/data/loader.h"
#include "wallfacer/data/prepare_text.h"
#include "wallfacer/data/token_file.h"

using namespace wf::data;
using wf::data::testing::read_bytes;
using wf::data::testing::TempDir;
using wf::data::testing::write_gz;
using wf::data::testing::write_bytes;
using Catch::Matchers::Contains;

namespace {

struct Found {
  std::vector<std::string> texts;
  std::vector<std::string> places;  // "file:line"
};

Found read_all(const std::vector<std::string>& files, const DocumentReadOptions& options,
               DocumentReadTotals* totals = nullptr) {
  Found found;
  const DocumentReadTotals t = read_documents(files, options, [&](std::string_view text, const RecordPlace& place) {
    found.texts.emplace_back(text);
    found.places.push_back(place.file + ":" + std::to_string(place.line));
  });
  if (totals != nullptr) *totals = t;
  return found;
}

DocumentReadOptions jsonl(std::int64_t max_bad_records = 0) {
  DocumentReadOptions options;
  options.format = DocumentFormat::jsonl;
  options.max_bad_records = max_bad_records;
  return options;
}

DocumentReadOptions split_on(const std::string& separator, std::int64_t max_bad_records) {
  DocumentReadOptions options;
  options.separator = separator;
  options.max_bad_records = max_bad_records;
  return options;
}

// The byte tokenizer with an end-of-text token 256 after its bytes (vocab 257), as GPT-2 has one.
class ByteTokenizerWithEnd final : public Tokenizer {
 public:
  std::string name() const override { return "byte+eot"; }
  std::int64_t vocab_size() const override { return 257; }
  std::vector<std::uint32_t> encode(std::string_view text) const override { return ByteTokenizer().encode(text); }
  std::string decode(std::span<const std::uint32_t> tokens) const override { return ByteTokenizer().decode(tokens); }
  std::optional<std::uint32_t> document_end() const override { return 256; }
};

std::vector<std::uint32_t> file_tokens(const std::string& path) {
  const TokenFile file(path);
  std::vector<std::uint32_t> tokens;
  for (std::int64_t i = 0; i < file.size(); ++i) tokens.push_back(file.at(i));
  return tokens;
}

std::vector<std::uint32_t> bytes_then(const std::string& text, std::optional<std::uint32_t> end) {
  std::vector<std::uint32_t> tokens(text.begin(), text.end());
  if (end) tokens.push_back(*end);
  return tokens;
}

}  // namespace

TEST_CASE("JSON Lines records: the text under the key, or why the record is bad", "[data][documents]") {
  const auto text_of = [](std::string_view line) { return parse_jsonl_record(line, "text"); };
  CHECK(text_of(R"({"text": "hello", "id": 3})").text == "hello");
  CHECK(text_of(R"({"meta": {"text": 1}, "text": "a\nb \u00e9 \ud83d\ude00"})").text ==
        "a\nb \xc3\xa9 \xf0\x9f\x98\x80");
  CHECK(parse_jsonl_record(R"({"content": "x", "text": 1})", "content").text == "x");

  const auto bad = [&](std::string_view line, BadRecordKind kind, const std::string& reason) {
    const JsonlRecord record = text_of(line);
    INFO(line);
    REQUIRE_FALSE(record.text.has_value());
    CHECK(record.problem == kind);
    CHECK_THAT(record.reason, Contains(reason));
  };
  bad("{\"text\": \"caf\xe9\"}", BadRecordKind::invalid_utf8, "byte 0xe9 at column 14 is not valid UTF-8");
  bad(R"({"text": "open)", BadRecordKind::invalid_json, "parse error");
  bad(R"({"text": "a"} trailing)", BadRecordKind::invalid_json, "parse error");
  bad(R"({"text": "\ud800"})", BadRecordKind::invalid_json, "surrogate");
  bad(R"({"text": "a", "text": "b"})", BadRecordKind::invalid_json, "appears 2 times");
  bad(R"(["text", "a"])", BadRecordKind::not_an_object, "holds an array, not a JSON object");
  bad(R"("text")", BadRecordKind::not_an_object, "holds a string");
  bad(R"({"id": 1, "body": {"text": "nested"}})", BadRecordKind::missing_key, "no key \"text\" (its keys: id, body)");
  bad("{}", BadRecordKind::missing_key, "the object is empty");
  bad(R"({"text": null})", BadRecordKind::not_a_string, "\"text\" holds null, not a string");
  bad(R"({"text": ["a"]})", BadRecordKind::not_a_string, "holds an array");
  bad(R"({"text": {"a": "b"}})", BadRecordKind::not_a_string, "holds an object");
}

TEST_CASE("JSON Lines files, plain and gzipped, in folders read recursively in sorted order", "[data][documents]") {
  TempDir dir;
  std::filesystem::create_directories(dir.file("in/b"));
  // CRLF, blank lines, no final newline.
  write_bytes(dir.file("in/b/2.jsonl"), "{\"text\": \"two\"}\r\n\n  \n{\"text\": \"three\"}");
  write_gz(dir.file("in/a.jsonl.gz"), "{\"text\": \"one\"}\n");
  write_bytes(dir.file("in/notes.txt"), "not read: not a .jsonl file");
  write_bytes(dir.file("in/.hidden.jsonl"), "{\"text\": \"hidden\"}\n");
  write_gz(dir.file("single.gz"), "{\"text\": \"named\"}\n");  // named: read whatever its name

  const std::vector<std::string> files =
      list_document_files({dir.file("in"), dir.file("single.gz")}, DocumentFormat::jsonl);
  REQUIRE(files ==
          std::vector<std::string>{dir.file("in/a.jsonl.gz"), dir.file("in/b/2.jsonl"), dir.file("single.gz")});
  DocumentReadTotals totals;
  const Found found = read_all(files, jsonl(), &totals);
  CHECK(found.texts == std::vector<std::string>{"one", "two", "three", "named"});
  CHECK(found.places == std::vector<std::string>{dir.file("in/a.jsonl.gz") + ":1", dir.file("in/b/2.jsonl") + ":1",
                                                 dir.file("in/b/2.jsonl") + ":4", dir.file("single.gz") + ":1"});
  CHECK(totals.files == 3);
  CHECK(totals.documents == 4);
  CHECK(totals.bad.total == 0);

  CHECK_THROWS_WITH(list_document_files({dir.file("in/b")}, DocumentFormat::text),
                    Contains("holds no text file (.txt, .txt.gz, searched recursively)"));
  CHECK_THROWS_WITH(list_document_files({dir.file("nowhere")}, DocumentFormat::jsonl), Contains("does not exist"));
  write_bytes(dir.file("empty.jsonl"), "");
  CHECK_THROWS_WITH(list_document_files({dir.file("empty.jsonl")}, DocumentFormat::jsonl), Contains("is empty"));
}

TEST_CASE("bad records are counted and reported by file and line; past --max-bad-records the read stops",
          "[data][documents]") {
  TempDir dir;
  const std::string path = dir.file("mixed.jsonl");
  write_bytes(path,
              "{\"text\": \"good\"}\n"      // 1
              "{\"body\": \"x\"}\n"         // 2 missing key
              "not json\n"                  // 3 invalid JSON
              "{\"text\": 7}\n"             // 4 not a string
              "{\"text\": \"\xff\"}\n"      // 5 invalid UTF-8
              "[1]\n"                       // 6 not an object
              "{\"text\": \"\"}\n"          // 7 empty: skipped, not bad
              "{\"text\": \"also good\"}\n"  // 8
              "{\"id\": 2}\n");             // 9 missing key
  DocumentReadTotals totals;
  const Found found = read_all({path}, jsonl(6), &totals);
  CHECK(found.texts == std::vector<std::string>{"good", "also good"});
  CHECK(totals.empty_skipped == 1);
  CHECK(totals.bad.total == 6);
  CHECK(totals.bad.by_kind == std::array<std::int64_t, kBadRecordKinds>{1, 1, 1, 2, 1});
  REQUIRE(totals.bad.examples.size() == BadRecordReport::kExamples);
  CHECK_THAT(totals.bad.examples[0], Contains(path + ":2: missing key: no key \"text\""));
  CHECK_THAT(totals.bad.examples[1], Contains(path + ":3: invalid JSON"));
  CHECK_THAT(totals.bad.examples[2], Contains(path + ":4: key not a string"));
  CHECK_THAT(totals.bad.examples[3], Contains(path + ":5: invalid UTF-8"));
  CHECK_THAT(totals.bad.examples[4], Contains(path + ":6: not a JSON object"));
  CHECK(totals.bad.summary() ==
        "6 bad records: 1 invalid UTF-8, 1 invalid JSON, 1 not a JSON object, 2 missing key, 1 key not a string");

  // One more than the limit stops the read, naming the first ones and the last.
  CHECK_THROWS_WITH(read_all({path}, jsonl(5)),
                    Contains("more than --max-bad-records 5 bad records") && Contains(path + ":2: missing key") &&
                        Contains("...; " + path + ":9: missing key") && Contains("--max-bad-records N"));
  // The default allows none.
  CHECK_THROWS_WITH(read_all({path}, jsonl()),
                    Contains("more than --max-bad-records 0") && Contains(path + ":2: missing key"));
}

TEST_CASE("text files: one document per file, or split on a separator, with lines for bad ones", "[data][documents]") {
  TempDir dir;
  write_bytes(dir.file("a.txt"), "first file\n");
  write_gz(dir.file("b.txt.gz"), "second\nfile\n");
  CHECK(read_all({dir.file("a.txt"), dir.file("b.txt.gz")}, {}).texts ==
        std::vector<std::string>{"first file\n", "second\nfile\n"});

  write_bytes(dir.file("c.txt"), "one\nline two\n\n\ntwo\n\n \n\nbad \xc3 here\n\nthree<|endoftext|>four");
  DocumentReadTotals totals;
  const Found blank =
      read_all({dir.file("c.txt")}, split_on(unescape_separator("\\n\\n"), 1), &totals);
  // Pieces are kept as they are (the third newline of a run starts the next one), only blank ones
  // are skipped; each is placed at the line it starts on.
  CHECK(blank.texts == std::vector<std::string>{"one\nline two", "\ntwo", "three<|endoftext|>four"});
  CHECK(blank.places ==
        std::vector<std::string>{dir.file("c.txt") + ":1", dir.file("c.txt") + ":4", dir.file("c.txt") + ":11"});
  CHECK(totals.empty_skipped == 1);  // " " on line 7
  REQUIRE(totals.bad.examples.size() == 1);
  CHECK_THAT(totals.bad.examples[0], Contains(dir.file("c.txt") + ":9: invalid UTF-8: byte 0xc3"));

  const Found eot = read_all({dir.file("c.txt")}, split_on("<|endoftext|>", 1));
  CHECK(eot.texts == std::vector<std::string>{"four"});  // the first piece holds the invalid byte

  CHECK(unescape_separator("a\\tb\\r\\n\\\\") == "a\tb\r\n\\");
  CHECK_THROWS_WITH(unescape_separator("\\x"), Contains("the escapes are"));
  CHECK_THROWS_WITH(unescape_separator(""), Contains("--separator is empty"));
}

TEST_CASE("a corrupt or cut gzip document file is an error naming it", "[data][documents]") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 2000; ++i) text += std::to_string(i * 7919 % 1000) + " ";
  write_gz(dir.file("whole.txt.gz"), text);
  const std::string bytes = read_bytes(dir.file("whole.txt.gz"));
  write_bytes(dir.file("cut.txt.gz"), bytes.substr(0, bytes.size() / 2));
  CHECK_THROWS_WITH(read_all({dir.file("cut.txt.gz")}, {}),
                    Contains("document file '" + dir.file("cut.txt.gz") + "' is cut short"));
  write_bytes(dir.file("cut.jsonl.gz"), bytes.substr(0, bytes.size() - 4));  // the trailer's length cut
  CHECK_THROWS_WITH(read_all({dir.file("cut.jsonl.gz")}, jsonl(9)),
                    Contains("is cut short"));
  std::string corrupt = bytes;
  corrupt[corrupt.size() - 6] ^= 0x55;  // the CRC-32 in the trailer
  write_bytes(dir.file("corrupt.txt.gz"), corrupt);
  CHECK_THROWS_WITH(read_all({dir.file("corrupt.txt.gz")}, {}), Contains("is a corrupt gzip stream"));
}

TEST_CASE("document indexes round-trip, and a damaged one is an error naming the file and the fix",
          "[data][documents][document_index]") {
  TempDir dir;
  CHECK(document_index_path("data/x/train.bin") == "data/x/train.docs");
  CHECK(document_index_path("tokens") == "tokens.docs");

  const std::string path = dir.file("train.docs");
  const DocumentIndex index{.token_count = 10, .starts = {0, 3, 4, 9}, .end_of_text = 256};
  write_document_index(path, index);
  CHECK(read_document_index(path) == index);
  const std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() == 32 + 4 * 8);
  CHECK(bytes.substr(0, 8) == "WFDOCIDX");
  const DocumentIndex no_end{.token_count = 5, .starts = {0}, .end_of_text = std::nullopt};
  write_document_index(path, no_end);
  CHECK(read_document_index(path) == no_end);
  CHECK(read_bytes(path).substr(12, 4) == std::string(4, '\xff'));
  write_document_index(path, DocumentIndex{});
  CHECK(read_document_index(path).documents() == 0);

  write_document_index(path, index);
  const auto damaged = [&](const std::string& contents, const std::string& problem) {
    write_bytes(path, contents);
    CHECK_THROWS_WITH(read_document_index(path),
                      Contains("document index '" + path + "'") && Contains(problem) && Contains("prepare-text"));
  };
  const auto with_u64 = [&](std::size_t at, std::uint64_t value) {
    std::string b = bytes;
    std::memcpy(b.data() + at, &value, 8);
    return b;
  };
  damaged(bytes.substr(0, 20), "is truncated: 20 bytes, shorter than its 32-byte header");
  damaged("XXDOCIDX" + bytes.substr(8), "wrong magic");
  damaged(bytes.substr(0, 8) + std::string("\x02\0\0\0", 4) + bytes.substr(12), "unknown format version 2");
  damaged(bytes.substr(0, bytes.size() - 8), "truncated: its header says 4 documents but only 24 bytes follow");
  damaged(bytes + "x", "1 bytes follow its 4 document starts");
  damaged(with_u64(24, 1ull << 60), "truncated: its header says 1152921504606846976 documents");
  damaged(with_u64(32, 1), "the first document starts at token 1, not 0");
  damaged(with_u64(48, 3), "document 2 starts at token 3, which is not after document 1's start (3)");
  damaged(with_u64(56, 10), "document 3 starts at token 10");
  damaged(with_u64(56, ~0ull), "document 3 starts at token");
  damaged(with_u64(16, 0), "4 documents for 0 tokens");
  CHECK_THROWS_WITH(read_document_index(dir.file("none.docs")), Contains("does not exist"));
  CHECK_THROWS_WITH(write_document_index(path, DocumentIndex{.token_count = 3, .starts = {0, 5}, .end_of_text = {}}),
                    Contains("document 1 starts at token 5"));
}

TEST_CASE("the validation set is the last whole documents, closest to the fraction", "[data][documents]") {
  const std::vector<std::int64_t> starts{0, 10, 20, 25, 40};  // 50 tokens
  CHECK(validation_start(starts, 50, 0.0) == 50);
  CHECK(validation_start(starts, 50, 0.1) == 40);   // 5 wanted: 10 (40..50) is closest
  CHECK(validation_start(starts, 50, 0.5) == 25);   // 25 wanted: exactly
  CHECK(validation_start(starts, 50, 0.99) == 10);  // at least one document for training
  CHECK(validation_start({0, 10}, 20, 0.25) == 10);  // 5 wanted: 10 or 20 away... 10 is the only choice
  CHECK(validation_start({0, 4, 6}, 8, 0.375) == 6);  // 3 wanted: 2 and 4 are as close; the smaller set
  CHECK(validation_start({0}, 20, 0.1) == 18);       // one document: cut
}

TEST_CASE("prepare_text writes token files, indexes and an end-of-text token after each document",
          "[data][documents][prepare_text]") {
  TempDir dir;
  std::filesystem::create_directories(dir.file("in"));
  write_bytes(dir.file("in/1.jsonl"), "{\"text\": \"aaaa\"}\n{\"text\": \"bb\"}\n{\"text\": \"c\"}\n");
  write_gz(dir.file("in/2.jsonl.gz"), "{\"text\": \"dddddd\"}\n{\"text\": \"e\"}\n");
  PrepareTextOptions options;
  options.inputs = {dir.file("in")};
  options.read = jsonl();
  options.output_dir = dir.file("out");
  options.val_fraction = 0.2;

  SECTION("with an end-of-text token") {
    const PrepareTextResult r = prepare_text(options, ByteTokenizerWithEnd());
    // Documents of 5, 3, 2, 7 and 2 tokens: 19 in all, 3 wanted for validation: the last document (2)
    // is closest.
    CHECK(r.end_of_text == 256u);
    CHECK(r.read.documents == 5);
    CHECK_FALSE(r.cut_single_document);
    std::vector<std::uint32_t> train;
    for (const char* text : {"aaaa", "bb", "c", "dddddd"}) {
      const auto doc = bytes_then(text, 256);
      train.insert(train.end(), doc.begin(), doc.end());
    }
    CHECK(file_tokens(r.train.tokens_path) == train);
    CHECK(file_tokens(r.val.tokens_path) == bytes_then("e", 256));
    CHECK(read_document_index(r.train.index_path) ==
          DocumentIndex{.token_count = 17, .starts = {0, 5, 8, 10}, .end_of_text = 256});
    CHECK(read_document_index(r.val.index_path) == DocumentIndex{.token_count = 2, .starts = {0}, .end_of_text = 256});
    CHECK(r.train.index_path == dir.file("out/train.docs"));
    CHECK(r.val.documents == 1);
    // The loader's source reads the index and checks the end-of-text tokens against the file.
    CHECK(open_token_file_source(r.train.tokens_path)->documents()->starts == std::vector<std::int64_t>{0, 5, 8, 10});
  }
  SECTION("without one (the byte tokenizer)") {
    const PrepareTextResult r = prepare_text(options, ByteTokenizer());
    CHECK_FALSE(r.end_of_text.has_value());
    CHECK(file_tokens(r.train.tokens_path) == bytes_then("aaaabbcdddddd", std::nullopt));
    CHECK(read_document_index(r.train.index_path) ==
          DocumentIndex{.token_count = 13, .starts = {0, 4, 6, 7}, .end_of_text = std::nullopt});
    CHECK(file_tokens(r.val.tokens_path) == bytes_then("e", std::nullopt));
  }
  SECTION("progress lines name the documents, tokens, bytes read and the time left") {
    std::FILE* log = std::tmpfile();
    REQUIRE(log != nullptr);
    options.progress = log;
    options.progress_seconds = 0;  // a line at every document
    prepare_text(options, ByteTokenizer());
    std::rewind(log);
    std::string text(4096, '\0');
    text.resize(std::fread(text.data(), 1, text.size(), log));
    std::fclose(log);
    CHECK_THAT(text, Contains("prepare-text: 1 documents, 4 tokens, 0.0/0.0 MiB read (") && Contains("left\n") &&
                         Contains("prepare-text: 5 documents, 14 tokens, 0.0/0.0 MiB read (100%), 0m00s left\n"));
  }
  SECTION("one document: the validation set is its tail, and the run says so") {
    write_bytes(dir.file("one.txt"), "0123456789");
    options.inputs = {dir.file("one.txt")};
    options.read = {};
    const PrepareTextResult r = prepare_text(options, ByteTokenizer());
    CHECK(r.cut_single_document);
    CHECK(file_tokens(r.train.tokens_path) == bytes_then("01234567", std::nullopt));
    CHECK(file_tokens(r.val.tokens_path) == bytes_then("89", std::nullopt));
    CHECK(read_document_index(r.val.index_path).starts == std::vector<std::int64_t>{0});
  }
  SECTION("no documents at all") {
    write_bytes(dir.file("blank.jsonl"), "{\"text\": \"  \"}\n");
    options.inputs = {dir.file("blank.jsonl")};
    CHECK_THROWS_WITH(prepare_text(options, ByteTokenizer()), Contains("hold no document (1 empty"));
  }
}

TEST_CASE("prepare_text with a GPT-2 tokenizer closes each document with its <|endoftext|>",
          "[data][documents][prepare_text]") {
  TempDir dir;
  // A toy GPT-2 vocabulary (the real one is fetched: data_gpt2_vocab): its <|endoftext|> is 3.
  write_bytes(dir.file("encoder.json"), "{\"a\": 0, \"b\": 1, \"ab\": 2, \"<|endoftext|>\": 3}");
  write_bytes(dir.file("vocab.bpe"), "#version: 0.2\na b\n");
  const Gpt2Tokenizer toy(dir.file(""));
  REQUIRE(toy.document_end() == 3u);
  write_bytes(dir.file("docs.txt"), "abab\n\nba\n\na");
  PrepareTextOptions options;
  options.inputs = {dir.file("docs.txt")};
  options.read = split_on("\n\n", 0);
  options.output_dir = dir.file("out");
  options.val_fraction = 0.3;  // 2 of 8 tokens: the last document
  const PrepareTextResult r = prepare_text(options, toy);
  CHECK(file_tokens(r.train.tokens_path) == std::vector<std::uint32_t>{2, 2, 3, 1, 0, 3});
  CHECK(file_tokens(r.val.tokens_path) == std::vector<std::uint32_t>{0, 3});
  CHECK(read_document_index(r.train.index_path) ==
        DocumentIndex{.token_count = 6, .starts = {0, 3}, .end_of_text = 3});
  CHECK(ByteTokenizer().document_end() == std::nullopt);
}

TEST_CASE("a token file's documents: a missing or mismatched index is an error naming both files",
          "[data][documents][document_index]") {
  TempDir dir;
  const std::string tokens = dir.file("train.bin");
  write_token_file(tokens, {1, 2, 256, 3, 256}, 257);
  const auto source = open_token_file_source(tokens);
  CHECK_THROWS_WITH(source->documents(), Contains("has no document index '" + dir.file("train.docs") + "'") &&
                                             Contains("data.pack: false"));
  write_document_index(dir.file("train.docs"), {.token_count = 4, .starts = {0}, .end_of_text = 256});
  CHECK_THROWS_WITH(source->documents(), Contains("is for 4 tokens but token file '" + tokens + "' holds 5"));
  write_document_index(dir.file("train.docs"), {.token_count = 5, .starts = {0, 2}, .end_of_text = 256});
  CHECK_THROWS_WITH(source->documents(), Contains("document 0 should end with the end-of-text token 256 at token 1"));
  write_document_index(dir.file("train.docs"), {.token_count = 5, .starts = {0, 3}, .end_of_text = 256});
  CHECK(source->documents()->starts == std::vector<std::int64_t>{0, 3});
  CHECK_THROWS_WITH(make_synthetic_source(10, 100, 1)->documents(), Contains("has no documents to pack"));
}
