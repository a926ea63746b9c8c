#!/usr/bin/env python3
"""PyTorch's side of the device check's table (scripts/device-check.sh, docs/gpu.md), in one process.

    python3 scripts/bench_torch_gpu.py --device cuda --gemm 8192 --attention 1,8192,16,128 \
        --gpt gpt-tiny,4,256,4,256,4,256,f32 --gpt gpt2-124m,12,768,12,50304,8,1024,bf16 [--iters 10 --warmup 3]

Prints one JSON object per line: first the versions ("bench": "versions": torch, CUDA, cuDNN, NCCL,
the device), then one per measurement, each with the numbers `wallfacer bench device --json` and
the wallfacer training runs give, so that the table puts them side by side:
  - gemm: torch.matmul of bf16 [n, n] @ [n, n] on normal draws; FLOPs 2·n³;
  - attention: torch.nn.functional.scaled_dot_product_attention(is_causal=True) on bf16
    q, k, v [B, H, N, d], forward then backward from a random gradient; FLOPs: forward
    2·B·H·N²·d (causal: half of 4·B·H·N²·d), backward 2.5× the forward — the convention of
    src/cli/bench_device_command.cpp;
  - gpt: one training step of tests/reference/gpt_reference.py's GptReference (the model our
    GPT is checked against) with its attention swapped for SDPA, eager: forward (mean
    cross-entropy) + backward + gradient clipping at 1.0 + AdamW (fused on CUDA) + zero_grad;
    f32 with TF32 off, or bf16 autocast with f32 weights and optimizer state, as ours trains.
    SPEC is name,layers,d_model,heads,vocab,batch,seq,dtype (max_seq_len = seq, d_ff = 4·d_model).
Times are medians after --warmup untimed calls: CUDA events around each GEMM and attention call,
and the host clock around each synchronized training step. --device cpu runs the same code on the
CPU (a test of the script; a torch without SDPA, older than 2.0, times the reference's own attention).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import gpt_reference  # noqa: E402

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def sdpa_attend(self, q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


if HAS_SDPA:
    gpt_reference.Attention.attend = sdpa_attend


class Timer:
    """Seconds of one call: CUDA events on a GPU, the host clock (after a sync) elsewhere."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def __call__(self, fn):
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e-3
        begin = time.perf_counter()
        fn()
        return time.perf_counter() - begin


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_of(timer, fn, warmup, iters):
    for _ in range(warmup):
        timer(fn)
    return statistics.median_high([timer(fn) for _ in range(iters)])


def bench_gemm(n, device, timer, a):
    x = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    y = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    out = {}

    def call():
        out["c"] = torch.matmul(x, y)

    s = median_of(timer, call, a.warmup, a.iters)
    assert torch.isfinite(out["c"]).all(), "torch.matmul gave non-finite values"
    return {"bench": "gemm", "dtype": "bf16", "M": n, "N": n, "K": n, "ms": s * 1e3, "tflops": 2.0 * n ** 3 / s * 1e-12,
            "flops": "2*M*N*K", "op": "torch.matmul"}


def bench_attention(spec, device, timer, a):
    B, N, H, d = (int(x) for x in spec.split(","))
    shape = (B, H, N, d)
    q, k, v = (torch.randn(shape, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grad = torch.randn(shape, device=device, dtype=torch.bfloat16)
    attend = F.scaled_dot_product_attention if HAS_SDPA else None
    fwd, bwd = [], []
    for i in range(a.warmup + a.iters):
        for t in (q, k, v):
            t.grad = None
        box = {}

        def forward():
            if attend is not None:
                box["o"] = attend(q, k, v, is_causal=True)
            else:  # torch < 2.0: the reference's attention (a test of the script only)
                box["o"] = gpt_reference.Attention.attend(argparse.Namespace(hd=d), q, k, v)

        f = timer(forward)
        b = timer(lambda: box["o"].backward(grad))
        if i >= a.warmup:
            fwd.append(f)
            bwd.append(b)
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v)), "SDPA's backward gave non-finite gradients"
    f, b = statistics.median_high(fwd), statistics.median_high(bwd)
    flops = 2.0 * B * H * N * N * d
    return {"bench": "attention", "dtype": "bf16", "causal": True, "batch": B, "tokens": N, "heads": H, "head_dim": d,
            "fwd_ms": f * 1e3, "bwd_ms": b * 1e3, "ms": (f + b) * 1e3, "tflops": 3.5 * flops / (f + b) * 1e-12,
            "fwd_tflops": flops / f * 1e-12, "bwd_tflops": 2.5 * flops / b * 1e-12,
            "flops": "fwd 2*B*H*N^2*d (causal), bwd 2.5*fwd",
            "op": "scaled_dot_product_attention" if HAS_SDPA else "naive (torch < 2.0)"}


def bench_gpt(spec, device, a):
    name, layers, d_model, heads, vocab, batch, seq, dtype = spec.split(",")
    layers, d_model, heads, vocab, batch, seq = (int(x) for x in (layers, d_model, heads, vocab, batch, seq))
    torch.manual_seed(0)
    o = gpt_reference.Options(vocab_size=vocab, max_seq_len=seq, n_layer=layers, n_head=heads, d_model=d_model)
    model = gpt_reference.GptReference(o).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    fused = {"fused": True} if device.type == "cuda" else {}
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=1e-4, betas=(0.9, 0.95), eps=1e-8, **fused)
    inputs = torch.randint(0, vocab, (batch, seq), device=device)
    targets = torch.randint(0, vocab, (batch, seq), device=device)
    positions = torch.arange(seq, device=device)
    if dtype == "bf16":
        autocast = lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)  # noqa: E731
    else:
        autocast = lambda: torch.autocast(device_type=device.type, enabled=False)  # noqa: E731

    times, loss = [], None
    for i in range(a.gpt_warmup + a.gpt_steps):
        sync(device)
        start = time.perf_counter()
        with autocast():
            _, loss = model.loss(inputs, targets, positions)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync(device)
        if i >= a.gpt_warmup:
            times.append(time.perf_counter() - start)
    assert math.isfinite(loss.item()), f"{name}: the loss is not finite ({loss.item()})"
    ms = statistics.median_high(times) * 1e3
    return {"bench": "gpt", "model": name, "dtype": dtype, "layers": layers, "d_model": d_model, "heads": heads,
            "vocab": vocab, "batch": batch, "seq": seq, "parameters": sum(p.numel() for p in model.parameters()),
            "ms_per_step": ms, "tokens_per_s": batch * seq / (ms * 1e-3), "steps": a.gpt_steps,
            "attention": "scaled_dot_product_attention" if HAS_SDPA else "naive (torch < 2.0)",
            "optimizer": "AdamW fused" if fused else "AdamW"}


def versions(device):
    v = {"bench": "versions", "torch": torch.__version__, "cuda": torch.version.cuda, "device": str(device)}
    if device.type == "cuda":
        v["gpu"] = torch.cuda.get_device_name(device)
        v["cudnn"] = torch.backends.cudnn.version()
        try:
            v["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception as e:  # noqa: BLE001 (a wheel without NCCL: say so, do not stop)
            v["nccl"] = f"unavailable ({e})"
    return v


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--gemm", type=int, default=0, help="M = N = K of the bf16 GEMM (0: none)")
    p.add_argument("--attention", default="", help="B,N,H,d of the causal bf16 attention (empty: none)")
    p.add_argument("--gpt", action="append", default=[], help="name,layers,d_model,heads,vocab,batch,seq,f32|bf16")
    p.add_argument("--warmup", type=int, default=2, help="untimed GEMM / attention calls")
    p.add_argument("--iters", type=int, default=10, help="timed GEMM / attention calls (median)")
    p.add_argument("--gpt-warmup", type=int, default=3)
    p.add_argument("--gpt-steps", type=int, default=10)
    a = p.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit("bench_torch_gpu: torch sees no CUDA device (use --device cpu to test the script)")
        torch.backends.cuda.matmul.allow_tf32 = False  # f32 as ours: TF32 off
        torch.backends.cudnn.allow_tf32 = False
    timer = Timer(device)
    print(json.dumps(versions(device)), flush=True)
    if a.gemm:
        print(json.dumps(bench_gemm(a.gemm, device, timer, a)), flush=True)
    if a.attention:
        print(json.dumps(bench_attention(a.attention, device, timer, a)), flush=True)
    for spec in a.gpt:
        print(json.dumps(bench_gpt(spec, device, a)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
