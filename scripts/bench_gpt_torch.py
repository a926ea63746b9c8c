#!/usr/bin/env python3
"""`wallfacer bench gpt`'s training step in PyTorch (Debian's python3-torch 1.13), for comparison.

    /usr/bin/python3 scripts/bench_gpt_torch.py --layers 4 --d-model 256 --heads 4 --vocab 256 \
        --batch 4 --seq 256 --threads 1 [--steps 5 --warmup 1 --json]

The model is tests/reference/gpt_reference.py's GptReference, the one the reference test checks
ours against, so both sides compute the same thing. Timing is the same as ours
(src/cli/bench_gpt_command.cpp): random tokens, `warmup` untimed steps, then the median of
`steps` steps of forward (mean cross-entropy) + backward + AdamW (lr 1e-4, betas 0.9/0.95,
weight decay 0.1 on matrices only) + zero_grad.
"""
import argparse
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
    p.add_argument("--json", action="store_true")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
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
    ms = {k: 1e3 * statistics.median_high(v) for k, v in
          (("ms_per_step", step), ("forward_ms", forward), ("backward_ms", backward), ("adamw_ms", update))}
    if a.json:
        print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), **ms}))
    else:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s): {ms['ms_per_step']:.1f} ms/step "
              f"(median of {a.steps}; forward {ms['forward_ms']:.1f}, backward {ms['backward_ms']:.1f}, "
              f"AdamW {ms['adamw_ms']:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
