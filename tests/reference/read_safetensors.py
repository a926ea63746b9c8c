#!/usr/bin/env python3
"""Reads a safetensors file the way PyTorch-side readers do and checks the reference tensors.

    read_safetensors.py FILE

FILE is written by `test_train "[.safetensors_reference]"` (tests/train/test_safetensors.cpp).
Debian 12 has torch (python3-torch) but no safetensors package, so the reader is the format
itself: a little-endian u64 header length, the JSON header, then raw little-endian data that
torch views in place (which also checks that every tensor is aligned for its dtype). Exits non-zero with a message on any mismatch.
"""
import json
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "F16": torch.float16,
          "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    metadata = header.pop("__metadata__", {})
    # One byte tensor over the whole data section, viewed as each dtype in place, as the
    # safetensors library's PyTorch loader does: torch refuses a view at a misaligned offset.
    body = torch.frombuffer(bytearray(data[8 + header_len:]) or bytearray(1), dtype=torch.uint8)
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name] = body[begin:end].view(DTYPES[info["dtype"]]).reshape(info["shape"])
    return header_len, tensors, metadata


# Keep in step with reference_value() in tests/train/train_testing.h.
def expected_value(dtype, i):
    if dtype == torch.int32:
        return 3 * i - 5
    if dtype == torch.int64:
        return 3 * i - 5 + (1 << 40)
    if dtype == torch.uint8:
        return (37 * i) % 256
    return (i % 7) - 3.0 + 0.5 * (i % 2)


EXPECTED = [("f32", torch.float32, [2, 3]), ("f64", torch.float64, [4]), ("bf16", torch.bfloat16, [3, 2]),
            ("f16", torch.float16, [5]), ("i32", torch.int32, [2, 2]), ("i64", torch.int64, [3]),
            ("u8", torch.uint8, [7]), ("scalar", torch.float32, []), ("empty", torch.float32, [0, 4])]


def main():
    header_len, tensors, metadata = read_safetensors(sys.argv[1])
    errors = []
    if header_len % 8 != 0:
        errors.append(f"header length {header_len} is not a multiple of 8")
    if list(tensors) != [name for name, _, _ in EXPECTED]:
        errors.append(f"tensor names {list(tensors)}")
    if metadata != {"format": "pt", "writer": "wallfacer"}:
        errors.append(f"metadata {metadata}")
    for name, dtype, shape in EXPECTED:
        t = tensors.get(name)
        if t is None:
            continue
        if t.dtype != dtype or list(t.shape) != shape:
            errors.append(f"{name}: {t.dtype} {list(t.shape)}, expected {dtype} {shape}")
            continue
        want = torch.tensor([expected_value(dtype, i) for i in range(t.numel())], dtype=dtype).reshape(shape)
        if not torch.equal(t, want):
            errors.append(f"{name}: values {t.tolist()}, expected {want.tolist()}")
    for e in errors:
        print("read_safetensors.py:", e, file=sys.stderr)
    if errors:
        return 1
    print(f"torch {torch.__version__} read {len(tensors)} tensors from {sys.argv[1]}: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
