#!/usr/bin/env python3
"""`wallfacer bench gpt`'s training step in PyTorch (Debian's python3-torch 1.13), for comparison.

    /usr/bin/python3 scripts/bench_gpt_torch.py --layers 4 --d-model 256 --heads 4 --vocab 256 \
        --batch 4 --seq 256 --threads 1 [--steps 5 --warmup 1 --dtype f32|bf16 --json]

The model is tests/reference/gpt_reference.py's GptReference, the one the reference test checks
ours against, so both sides compute the same thing (--json prints the parameter count, which
scripts/bench-gpt.sh checks against ours). Timing is the same as ours
(src/cli/bench_gpt_command.cpp): random tokens, `warmup` untimed steps, then the median of
`steps` steps of forward (mean cross-entropy) + backward + AdamW (lr 1e-4, betas 0.9/0.95,
weight decay 0.1 on matrices only) + zero_grad. "Median" is the upper median (the element at
n // 2 of the sorted times), as ours takes it, so with an even --steps both pick the same element.

--dtype bf16 is PyTorch's usual CPU mixed precision: the forward runs under
torch.autocast(device_type="cpu", dtype=torch.bfloat16) (matmuls in bf16, reductions such as the
loss in f32), while the weights, their gradients and AdamW's state stay f32.

--json prints one JSON object with the keys of `wallfacer bench gpt --json` that
scripts/bench-gpt.sh reads (ms_per_step, forward_ms, backward_ms, adamw_ms, tokens_per_s, the
shape, threads, steps) plus torch's version and the precision used.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import torch

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from gpt_reference import GptReference, Options  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=0)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", choices=("f32", "bf16"), default="f32",
                   help="f32, or bf16: CPU autocast mixed precision (weights and AdamW in f32)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.steps < 1:
        p.error("--steps must be >= 1")

    if a.dtype == "bf16":
        if not hasattr(torch, "autocast"):
            sys.exit(f"torch {torch.__version__} has no torch.autocast: no CPU bf16 autocast")
        precision = "bf16 autocast (torch.autocast cpu bfloat16; f32 weights, grads and AdamW)"

        def forward_context():
            return torch.autocast(device_type="cpu", dtype=torch.bfloat16)
    else:
        precision = "f32"
        forward_context = contextlib.nullcontext

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    # max_seq_len = seq, as ours builds the model in bench gpt (the position table is part of the count).
    o = Options(vocab_size=a.vocab, max_seq_len=a.seq, n_layer=a.layers, n_head=a.heads, n_kv_head=a.kv_heads,
                d_model=a.d_model)
    model = GptReference(o)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    inputs = torch.randint(0, a.vocab, (a.batch, a.seq))
    targets = torch.randint(0, a.vocab, (a.batch, a.seq))
    positions = torch.arange(a.seq)

    step, forward, backward, update = [], [], [], []
    for i in range(a.warmup + a.steps):
        start = time.perf_counter()
        with forward_context():
            _, loss = model.loss(inputs, targets, positions)
        f = time.perf_counter() - start
        loss.backward()
        b = time.perf_counter() - start
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        s = time.perf_counter() - start
        if i >= a.warmup:
            step.append(s)
            forward.append(f)
            backward.append(b - f)
            update.append(s - b)
    if not torch.isfinite(loss.detach().float()):
        sys.exit(f"the loss is not finite ({loss.item()}): the timed steps did not compute a real step")
    # median_high: the element at n // 2 of the sorted times, as ours (src/core/timing.h median()).
    ms = {k: 1e3 * statistics.median_high(v) for k, v in
          (("ms_per_step", step), ("forward_ms", forward), ("backward_ms", backward), ("adamw_ms", update))}
    tokens = a.batch * a.seq
    if a.json:
        print(json.dumps({
            "torch": torch.__version__, "dtype": a.dtype, "precision": precision,
            "layers": a.layers, "d_model": a.d_model, "heads": a.heads, "kv_heads": o.n_kv_head, "vocab": a.vocab,
            "batch": a.batch, "seq": a.seq, "parameters": sum(q.numel() for q in model.parameters()),
            "threads": torch.get_num_threads(), "steps": a.steps, "warmup": a.warmup, **ms,
            "tokens_per_s": tokens / (ms["ms_per_step"] * 1e-3)}))
    else:
        print(f"torch {torch.__version__}, {precision}, {torch.get_num_threads()} thread(s): "
              f"{ms['ms_per_step']:.1f} ms/step (median of {a.steps} after {a.warmup} warm-up; "
              f"forward {ms['forward_ms']:.1f}, backward {ms['backward_ms']:.1f}, AdamW {ms['adamw_ms']:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
