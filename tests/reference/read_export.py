#!/usr/bin/env python3
"""PyTorch reads what `wallfacer checkpoint export` writes.

    read_export.py MODEL.safetensors ALL.safetensors

MODEL.safetensors is `wallfacer checkpoint export DIR`, ALL.safetensors the same checkpoint with
--optimizer (tests/train/kill_during_save_test.sh writes both from a tp 2 run). Checks with torch
(reading the format itself, as read_safetensors.py does) that the model file holds whole tensors
under global names, sorted, every value finite, the vocabulary unpadded; that the --optimizer file
holds the same model tensors bit for bit plus, per parameter, a scalar int64 step and exp_avg /
exp_avg_sq of the parameter's shape (exp_avg_sq non-negative). Exits non-zero with a message on
any mismatch.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_safetensors import read_safetensors  # noqa: E402

FIELDS = (".step", ".exp_avg", ".exp_avg_sq")


def main():
    _, model, model_meta = read_safetensors(sys.argv[1])
    _, everything, _ = read_safetensors(sys.argv[2])
    errors = []
    if model_meta != {"format": "pt"}:
        errors.append(f"metadata {model_meta}")
    if list(model) != sorted(model):
        errors.append("the model tensors are not sorted by name")
    if any(name.endswith(FIELDS) for name in model):
        errors.append("the model export holds optimizer state")
    embedding = model.get("token_embedding.weight")
    if embedding is None or list(embedding.shape) != [256, 32]:
        errors.append(f"token_embedding.weight: {None if embedding is None else list(embedding.shape)}, "
                      "expected the unpadded [256, 32]")
    for name, t in model.items():
        if not torch.isfinite(t).all():
            errors.append(f"{name}: non-finite values")
        other = everything.get(name)
        if other is None or not torch.equal(other, t):
            errors.append(f"{name}: differs between the two exports")
        if name in ("token_embedding.weight", "position_embedding.weight") or name.endswith((".weight", ".bias")):
            step = everything.get(name + ".step")
            if step is None or step.dtype != torch.int64 or list(step.shape) != [] or step.item() < 1:
                errors.append(f"{name}.step: missing or not a positive int64 scalar")
            for field in (".exp_avg", ".exp_avg_sq"):
                moment = everything.get(name + field)
                if moment is None or moment.shape != t.shape or moment.dtype != t.dtype:
                    errors.append(f"{name}{field}: missing or not of the parameter's shape and dtype")
                elif field == ".exp_avg_sq" and (moment < 0).any():
                    errors.append(f"{name}{field}: negative entries")
    extra = [n for n in everything if n not in model and not n.endswith(FIELDS)]
    if extra:
        errors.append(f"the --optimizer export holds unexpected tensors {extra}")
    for e in errors:
        print("read_export.py:", e, file=sys.stderr)
    if errors:
        return 1
    print(f"torch {torch.__version__} read {len(model)} model tensors and {len(everything)} in all: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
