#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/. checkpoint/valid-manifest.json is the one
input it reads instead: the manifest of fuzz_checkpoint's own tiny checkpoint, which only that
target can write (docs/fuzzing.md says how to refresh it); the other checkpoint seeds are edits
of it.

Each target gets real valid inputs, so the fuzzer starts past the format checks, and a few
edge cases that sit just beside them. Run from anywhere; the files are small and deterministic.
"""
import gzip
import json
import pathlib
import shutil
import struct

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CORPUS = HERE / "corpus"


def write(target, name, data):
    path = CORPUS / target / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


# ---- safetensors: u64 header length | JSON header padded to 8 | data ---------------------------
def safetensors(header, data=b"", pad=True):
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    f32 = struct.pack("<6f", *range(6))
    i64 = struct.pack("<2q", -1, 7)
    write("safetensors", "two-tensors", safetensors(
        {"__metadata__": {"format": "pt"},
         "weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [16, 40]},
         "step": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}}, i64 + f32))
    write("safetensors", "every-dtype", safetensors(
        {name: {"dtype": name, "shape": [1], "data_offsets": [offset, offset + size]}
         for name, size, offset in [("F64", 8, 0), ("I64", 8, 8), ("F32", 4, 16), ("I32", 4, 20),
                                     ("BF16", 2, 24), ("F16", 2, 26), ("U8", 1, 28)]}, bytes(29)))
    write("safetensors", "empty-and-scalar", safetensors(
        {"empty": {"dtype": "F32", "shape": [0, 4], "data_offsets": [4, 4]},
         "scalar": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}, bytes(4)))
    write("safetensors", "no-tensors", safetensors({}))
    write("safetensors", "truncated-data", safetensors(
        {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8)))
    write("safetensors", "header-past-end", struct.pack("<Q", 1 << 40) + b"{}")
    write("safetensors", "short", b"\x02\x00\x00")


# ---- token files: "WFTOKENS" | u32 version | u32 width | u64 count | tokens ---------------------
def token_file(width, tokens, version=1, count=None, magic=b"WFTOKENS"):
    header = magic + struct.pack("<IIQ", version, width, len(tokens) if count is None else count)
    return header + b"".join(struct.pack("<H" if width == 2 else "<I", t) for t in tokens)


def token_file_seeds():
    write("token_file", "uint16", token_file(2, [72, 101, 108, 108, 111, 10, 0, 65535]))
    write("token_file", "uint32", token_file(4, [50256, 0, 1, 70000]))
    write("token_file", "empty", token_file(2, []))
    write("token_file", "count-too-large", token_file(2, [1, 2], count=3))
    write("token_file", "width-3", token_file(3, [], count=0))
    write("token_file", "header-only-truncated", token_file(2, [])[:20])


# ---- IDX images: u8 resize | u16 images length | images file | labels file ----------------------
def idx(dims, payload, type_code=0x08):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


def idx_pair(images, labels, resize=0):
    return struct.pack("<BH", resize, len(images)) + images + labels


def idx_seeds():
    pixels = bytes((7 * i) % 256 for i in range(3 * 4 * 4))
    images, labels = idx([3, 4, 4], pixels), idx([3], bytes([0, 9, 2]))
    write("idx", "raw", idx_pair(images, labels))
    write("idx", "raw-resize-8", idx_pair(images, labels, resize=7))
    # mtime=0: the same bytes on every run.
    write("idx", "gzipped", idx_pair(gzip.compress(images, mtime=0), gzip.compress(labels, mtime=0), resize=3))
    write("idx", "count-mismatch", idx_pair(images, idx([2], bytes([0, 1]))))
    write("idx", "truncated", idx_pair(images[:-5], labels))
    write("idx", "trailing", idx_pair(images, labels + b"xyz"))
    write("idx", "swapped", idx_pair(labels, images))
    write("idx", "float32", idx_pair(idx([1, 1, 1], bytes(4), type_code=0x0D), idx([1], bytes(1))))
    write("idx", "huge-count", idx_pair(idx([1 << 30, 1, 2], bytes(8)), idx([1 << 30], bytes(4))))


# ---- run configs: the shipped tiny ones and a few edge cases -----------------------------------
def config_seeds():
    for name in ("gpt-tiny.yaml", "llama-tiny.yaml", "gpt-long-synthetic.yaml"):
        shutil.copy(ROOT / "configs" / name, CORPUS / "config" / name)
    write("config", "empty.yaml", "")
    write("config", "flow.yaml", "{model: {name: llama, n_layer: 2}, parallel: {dp: 2, sp: 2, sp_strategy: ulysses}}\n")
    write("config", "synthetic.yaml",
          "train:\n  steps: 3\n  seq_len: 64\n  dtype: bf16\ndata:\n  source: synthetic\n"
          "checkpoint:\n  every: 1\n  keep_last: 0\n")
    write("config", "unknown-key.yaml", "model:\n  name: gpt\n  n_layers: 4\n")


# ---- GPT-2 tokenizer: encoder.json NUL vocab.bpe ----------------------------------------------
def bytes_to_unicode():
    """GPT-2's table (src/data/gpt2_tokenizer.cpp)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 256
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(extra)
            extra += 1
    return table


def gpt2_seeds():
    symbols = bytes_to_unicode()
    merges = ["H e", "l l", "He ll", "Hell o", "\u0120 w", "o r", "\u0120w or", "l d", "\u0120wor ld",
              "' s", "\u0120 t", "\u0120t o"]
    vocab = [symbols[b] for b in range(256)] + ["".join(m.split(" ")) for m in merges] + ["<|endoftext|>"]
    encoder = json.dumps({token: i for i, token in enumerate(vocab)}, ensure_ascii=False)
    bpe = "#version: 0.2\n" + "\n".join(merges) + "\n"
    write("gpt2_tokenizer", "valid", encoder + "\0" + bpe)
    write("gpt2_tokenizer", "merge-not-in-encoder",
          json.dumps({**{symbols[b]: b for b in range(256)}, "<|endoftext|>": 256}, ensure_ascii=False)
          + "\0#version: 0.2\nH e\n")
    write("gpt2_tokenizer", "no-endoftext", '{"a": 0}\0a b\n')
    write("gpt2_tokenizer", "no-separator", '{"<|endoftext|>": 0}')


# ---- checkpoint manifests: edits of the valid one -----------------------------------------------
def checkpoint_seeds():
    valid = json.loads((CORPUS / "checkpoint" / "valid-manifest.json").read_text())
    files = valid["files"]

    def put(name, manifest):
        write("checkpoint", name, json.dumps(manifest, indent=2) + "\n")

    # fuzz_checkpoint reseals each input, so these reach the checks behind the manifest checksum.
    put("step-mismatch.json", {**valid, "step": 2})
    put("state-not-string.json", {**valid, "state": {"rng": 7}})
    put("model-size-wrong.json",
        {**valid, "files": {**files, "model.safetensors": {**files["model.safetensors"], "bytes": 1}}})
    put("version-2.json", {**valid, "version": 2})
    write("checkpoint", "not-json.json", '{"format": "wallfacer-checkpoint", "version": 3,')


# ---- JSON Lines documents (prepare-text --format jsonl): one file, raw or gzipped ----------------
def jsonl_seeds():
    records = ['{"text": "In the beginning God created the heaven and the earth."}',
               r'{"id": 7, "text": "caf\u00e9 \ud83d\ude00 tab\tnewline\n", "meta": {"text": 1}}',
               '{"text": "caf\u00e9, raw UTF-8"}',
               '{"text": ""}', '{"text": "   "}']
    write("jsonl", "valid.jsonl", "\n".join(records) + "\n")
    write("jsonl", "crlf-blank-lines.jsonl", '{"text": "a"}\r\n\r\n  \n{"text": "b"}')
    write("jsonl", "bad-records.jsonl", "\n".join([
        '{"body": "no text key"}', "not json", '{"text": 7}', '{"text": null}', '["text"]', '"text"',
        '{"text": "a", "text": "b"}', r'{"text": "\ud800"}', '{"text": "open', '{"text": "a"} trailing',
        '{"text": [[[[[[[[{"a": []}]]]]]]]]}']).encode() + b'\n{"text": "\xff\xfe"}\n')
    write("jsonl", "gzipped.jsonl.gz", gzip.compress("\n".join(records).encode(), mtime=0))


# ---- document indexes: "WFDOCIDX" | u32 version | u32 end-of-text | u64 tokens | u64 D | D x u64 --
def document_index(starts, tokens, end_of_text=0xFFFFFFFF, version=1, count=None, magic=b"WFDOCIDX"):
    header = magic + struct.pack("<IIQQ", version, end_of_text, tokens, len(starts) if count is None else count)
    return header + b"".join(struct.pack("<Q", s) for s in starts)


def document_index_seeds():
    write("document_index", "valid", document_index([0, 3, 4, 9], 10, end_of_text=50256))
    write("document_index", "no-end-of-text", document_index([0, 1, 2, 3], 4))
    write("document_index", "empty", document_index([], 0))
    write("document_index", "one-long-document", document_index([0], 1 << 40))
    write("document_index", "not-increasing", document_index([0, 5, 5], 10))
    write("document_index", "start-past-end", document_index([0, 10], 10))
    write("document_index", "count-too-large", document_index([0, 1], 4, count=1 << 61))
    write("document_index", "version-2", document_index([0], 1, version=2))
    write("document_index", "truncated", document_index([0, 2, 4], 8)[:-4])


if __name__ == "__main__":
    for target in ("safetensors", "token_file", "config", "gpt2_tokenizer", "idx", "jsonl", "document_index"):
        shutil.rmtree(CORPUS / target, ignore_errors=True)
        (CORPUS / target).mkdir(parents=True)
    safetensors_seeds()
    token_file_seeds()
    idx_seeds()
    config_seeds()
    gpt2_seeds()
    checkpoint_seeds()
    jsonl_seeds()
    document_index_seeds()
