#!/usr/bin/env python3
"""PyTorch's side of the device check's table (scripts/device-check.sh, docs/gpu.md), in one process.

    python3 scripts/bench_torch_gpu.py --device cuda --gemm 8192 --attention 1,8192,16,128 \
        --gpt gpt-tiny,4,256,4,256,4,256,f32 --gpt gpt2-124m,12,768,12,50304,8,1024,bf16 [--iters 10 --warmup 3]
    python3 scripts/bench_torch_gpu.py --device cuda --gemm-shape 8192x6144x2048 \
        --attention 1,32768,16,128,4,full --sdpa-backends --gpt gpt-1.3b,24,2048,16,50304,1,8192,bf16,rope \
        --dit dit-xl-2,28,1152,16,256,2,1,bf16

Prints one JSON object per line: first the versions ("bench": "versions": torch, CUDA, cuDNN, NCCL,
the device), then one per measurement, each with the numbers `wallfacer bench device --json` and
the wallfacer training runs give, so that the table puts them side by side:
  - gemm: torch.matmul of bf16 [n, n] @ [n, n] (--gemm n) or [M, K] @ [K, N] (each --gemm-shape
    MxNxK) on normal draws; FLOPs 2·M·N·K;
  - attention: torch.nn.functional.scaled_dot_product_attention on bf16 q [B, H, N, d], k and v
    [B, H_kv, N, d] (SPEC B,N,H,d[,H_kv[,causal|full]]: GQA through enable_gqa when H_kv < H),
    forward then backward from a random gradient; FLOPs: forward 4·B·H·N²·d (full) or half that
    (causal), backward 2.5× the forward — the convention of src/cli/bench_device_command.cpp.
    With --sdpa-backends each backend PyTorch offers (torch.nn.attention.SDPBackend: flash,
    memory-efficient, cuDNN, math) is timed alone (GQA: also with K and V repeated to every head,
    "+repeat_kv"), its time or why it could not run kept in "backends", and the row's numbers are
    the fastest's ("op" names it; a case none runs gives a row with "error");
  - gpt: one training step of tests/reference/gpt_reference.py's GptReference (the model our
    GPT is checked against) with its attention swapped for SDPA, eager: forward (mean
    cross-entropy) + backward + gradient clipping at 1.0 + AdamW (fused on CUDA) + zero_grad;
    f32 with TF32 off, or bf16 autocast with f32 weights and optimizer state, as ours trains.
    SPEC is name,layers,d_model,heads,vocab,batch,seq,dtype[,learned|rope] (max_seq_len = seq,
    d_ff = 4·d_model). Its row has tokens/s and torch.cuda.max_memory_allocated over the steps
    (peak_mem_bytes). Out of memory, the step is retried with every block under
    torch.utils.checkpoint, and the row says so ("checkpoint": "blocks");
  - dit: one training step of tests/reference/dit_reference.py's DitReference (the model our DiT is
    checked against; ddpm, learned sigma) with its attention swapped for SDPA (full mask), as the
    GPT step (AdamW fused, betas 0.9/0.999, no weight decay, clipping at 1.0, bf16 autocast) plus
    the EMA update of the weights; SPEC name,layers,d_model,heads,image_size,patch,batch,dtype
    (tokens = (image_size / patch)²); samples/s and the peak memory.
Times are medians after --warmup untimed calls: CUDA events around each GEMM and attention call,
and the host clock around each synchronized training step. --device cpu runs the same code on the
CPU (a test of the script; a torch without SDPA, older than 2.0, times the reference's own attention).
"""
import argparse
import contextlib
import gc
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import dit_reference  # noqa: E402
import gpt_reference  # noqa: E402

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def sdpa_attend(self, q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_dit_attention(self, x):
    """dit_reference.Attention.forward with SDPA (full mask) in place of the explicit softmax."""
    B, N, D = x.shape
    qkv = self.qkv(x).view(B, N, self.n_head, 3, self.hd)
    q, k, v = (qkv[:, :, :, j].transpose(1, 2) for j in range(3))  # [B, heads, N, hd]
    return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, D))


if HAS_SDPA:
    gpt_reference.Attention.attend = sdpa_attend
    dit_reference.Attention.forward = sdpa_dit_attention


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


def bench_gemm(shape, device, timer, a):
    M, N, K = shape
    x = torch.randn(M, K, device=device, dtype=torch.bfloat16)
    y = torch.randn(K, N, device=device, dtype=torch.bfloat16)
    out = {}

    def call():
        out["c"] = torch.matmul(x, y)

    s = median_of(timer, call, a.warmup, a.iters)
    assert torch.isfinite(out["c"]).all(), "torch.matmul gave non-finite values"
    return {"bench": "gemm", "dtype": "bf16", "M": M, "N": N, "K": K, "ms": s * 1e3,
            "tflops": 2.0 * M * N * K / s * 1e-12, "flops": "2*M*N*K", "op": "torch.matmul"}


def gemm_shape(text):
    """MxNxK -> (M, N, K), as `wallfacer bench device --shape` reads it."""
    try:
        shape = tuple(int(x) for x in text.split("x"))
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected MxNxK with three positive integers, got {text!r}")
    return shape


def attention_case(text):
    """B,N,H,d[,H_kv[,causal|full]] -> dict (H_kv 0 or absent: H; the mask causal unless given)."""
    parts = text.split(",")
    try:
        B, N, H, d = (int(x) for x in parts[:4])
        kv = int(parts[4]) if len(parts) > 4 else 0
    except ValueError:
        parts = []
    mask = parts[5] if len(parts) > 5 else "causal"
    if not 4 <= len(parts) <= 6 or mask not in ("causal", "full") or min(B, N, H, d) < 1 or kv < 0 or H % (kv or H):
        raise argparse.ArgumentTypeError(f"expected B,N,H,d[,H_kv[,causal|full]] with H_kv dividing H, got {text!r}")
    return {"batch": B, "tokens": N, "heads": H, "kv_heads": kv or H, "head_dim": d, "causal": mask == "causal"}


MATH_MAX_SCORES = 1 << 31  # the math backend materializes the scores: beyond this it only costs time


def sdpa_backends():
    """[(name, context manager factory)]: each SDPA backend alone, or the default dispatch when the
    torch has no torch.nn.attention (older than 2.3) or no SDPA at all."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return [("default", contextlib.nullcontext)]
    wanted = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")
    return [(name.lower(), lambda b=getattr(SDPBackend, name): sdpa_kernel([b]))
            for name in wanted if hasattr(SDPBackend, name)]


def time_attention(c, device, timer, a, backend, repeat_kv=False):
    """(forward s, backward s) medians of one attention case under one backend's context; with
    repeat_kv, GQA's K and V are repeated to every query head first (inside the timed forward)."""
    B, N, H, kv, d = c["batch"], c["tokens"], c["heads"], c["kv_heads"], c["head_dim"]
    q = torch.randn((B, H, N, d), device=device, dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn((B, kv, N, d), device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    grad = torch.randn((B, H, N, d), device=device, dtype=torch.bfloat16)
    gqa = {"enable_gqa": True} if kv != H and not repeat_kv else {}
    fwd, bwd = [], []
    for i in range(a.warmup + a.iters):
        for t in (q, k, v):
            t.grad = None
        box = {}

        def forward():
            with backend():
                if HAS_SDPA and repeat_kv:
                    kk, vv = (t.repeat_interleave(H // kv, dim=1) for t in (k, v))
                    box["o"] = F.scaled_dot_product_attention(q, kk, vv, is_causal=c["causal"])
                elif HAS_SDPA:
                    box["o"] = F.scaled_dot_product_attention(q, k, v, is_causal=c["causal"], **gqa)
                else:  # torch < 2.0: the explicit softmax (a test of the script only)
                    kk, vv = (t.repeat_interleave(H // kv, dim=1) for t in (k, v))
                    s = (q @ kk.transpose(-1, -2)) / math.sqrt(d)
                    if c["causal"]:
                        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool, device=device).triu(1), float("-inf"))
                    box["o"] = s.softmax(-1) @ vv

        f = timer(forward)
        with backend():
            b = timer(lambda: box["o"].backward(grad))
        if i >= a.warmup:
            fwd.append(f)
            bwd.append(b)
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v)), "SDPA's backward gave non-finite gradients"
    return statistics.median_high(fwd), statistics.median_high(bwd)


def bench_attention(c, device, timer, a):
    backends = sdpa_backends() if a.sdpa_backends else [("default", contextlib.nullcontext)]
    times, why = {}, {}
    # GQA: enable_gqa where a backend takes it, else K and V repeated to every head (what users do).
    tries = [(name, backend, False) for name, backend in backends]
    if c["kv_heads"] != c["heads"] and HAS_SDPA:
        tries += [(name + "+repeat_kv", backend, True) for name, backend in backends]
    for name, backend, repeat_kv in tries:
        if name.startswith("math") and c["batch"] * c["heads"] * c["tokens"] ** 2 > MATH_MAX_SCORES:
            why[name] = f"skipped: B*H*N^2 scores over {MATH_MAX_SCORES} (seconds and tens of GB; never the fastest)"
            continue
        try:
            times[name] = time_attention(c, device, timer, a, backend, repeat_kv)
        except (RuntimeError, AssertionError) as e:  # a backend that refuses the case (or runs out of memory)
            why[name] = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        if device.type == "cuda":
            torch.cuda.empty_cache()
    row = {"bench": "attention", "dtype": "bf16", **c, "mask": "causal" if c["causal"] else "full"}
    if not times:  # a row that says why, and the other cases still run
        return {**row, "error": "no SDPA backend ran this case", "backends": why}
    best = min(times, key=lambda name: sum(times[name]))
    f, b = times[best]
    flops = (2.0 if c["causal"] else 4.0) * c["batch"] * c["heads"] * c["tokens"] ** 2 * c["head_dim"]
    op = ("scaled_dot_product_attention" if HAS_SDPA else "naive (torch < 2.0)") + ("" if best == "default" else
                                                                                     f" ({best})")
    return {**row, "fwd_ms": f * 1e3, "bwd_ms": b * 1e3, "ms": (f + b) * 1e3, "tflops": 3.5 * flops / (f + b) * 1e-12,
            "fwd_tflops": flops / f * 1e-12, "bwd_tflops": 2.5 * flops / b * 1e-12,
            "flops": ("fwd 2*B*H*N^2*d (causal)" if c["causal"] else "fwd 4*B*H*N^2*d") + ", bwd 2.5*fwd",
            "op": op, "backends": {**{n: round(sum(t) * 1e3, 4) for n, t in times.items()}, **why}}


class Checkpointed(torch.nn.Module):
    """A block recomputed in the backward (torch.utils.checkpoint): what PyTorch users do when the
    activations of every block do not fit."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        return torch.utils.checkpoint.checkpoint(self.inner, *args, use_reentrant=False)


def is_out_of_memory(e):
    return isinstance(e, RuntimeError) and "out of memory" in str(e)


def train_steps(build, batch, device, dtype, a, betas, weight_decay, after_step=None):
    """The median training step of build(checkpoint) on `batch` (a loss of the model) in ms, the
    parameters, the peak memory and whether the blocks were checkpointed: forward under bf16 autocast
    (or f32), backward, clipping at 1.0, AdamW (fused on CUDA), zero_grad, after_step(model).
    Out of memory without checkpoints, it starts again with them."""
    for checkpoint in (False, True):
        model = optimizer = loss = None  # the failed try's model, state and graph go before the retry
        gc.collect()
        try:
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
            torch.manual_seed(0)
            model = build(checkpoint)
            decay = [p for p in model.parameters() if p.dim() >= 2]
            no_decay = [p for p in model.parameters() if p.dim() < 2]
            fused = {"fused": True} if device.type == "cuda" else {}
            optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                           {"params": no_decay, "weight_decay": 0.0}],
                                          lr=1e-4, betas=betas, eps=1e-8, **fused)
            enabled = dtype == "bf16"
            times, loss = [], None
            for i in range(a.gpt_warmup + a.gpt_steps):
                sync(device)
                start = time.perf_counter()
                with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=enabled):
                    loss = batch(model)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if after_step is not None:
                    after_step(model)
                sync(device)
                if i >= a.gpt_warmup:
                    times.append(time.perf_counter() - start)
            assert math.isfinite(loss.item()), f"the loss is not finite ({loss.item()})"
            peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
            parameters = sum(p.numel() for p in model.parameters())
            return {"ms_per_step": statistics.median_high(times) * 1e3, "steps": a.gpt_steps, "parameters": parameters,
                    "peak_mem_bytes": peak, "checkpoint": "blocks" if checkpoint else "none",
                    "optimizer": "AdamW fused" if fused else "AdamW"}
        except RuntimeError as e:
            if checkpoint or not is_out_of_memory(e):
                raise
    raise AssertionError("unreachable")


def bench_gpt(spec, device, a):
    fields = spec.split(",")
    name, layers, d_model, heads, vocab, batch, seq, dtype = fields[:8]
    positions = fields[8] if len(fields) > 8 else "learned"
    layers, d_model, heads, vocab, batch, seq = (int(x) for x in (layers, d_model, heads, vocab, batch, seq))
    o = gpt_reference.Options(vocab_size=vocab, max_seq_len=seq, n_layer=layers, n_head=heads, d_model=d_model,
                              positions=positions)

    def build(checkpoint):
        model = gpt_reference.GptReference(o).to(device)
        if checkpoint:
            model.blocks = torch.nn.ModuleList([Checkpointed(b) for b in model.blocks])
        return model

    inputs = torch.randint(0, vocab, (batch, seq), device=device)
    targets = torch.randint(0, vocab, (batch, seq), device=device)
    ids = torch.arange(seq, device=device)
    r = train_steps(build, lambda model: model.loss(inputs, targets, ids)[1], device, dtype, a, (0.9, 0.95), 0.1)
    return {"bench": "gpt", "model": name, "dtype": dtype, "layers": layers, "d_model": d_model, "heads": heads,
            "vocab": vocab, "batch": batch, "seq": seq, "positions": positions, **r,
            "tokens_per_s": batch * seq / (r["ms_per_step"] * 1e-3),
            "attention": "scaled_dot_product_attention" if HAS_SDPA else "naive (torch < 2.0)"}


def bench_dit(spec, device, a):
    name, layers, d_model, heads, image, patch, batch, dtype = spec.split(",")
    layers, d_model, heads, image, patch, batch = (int(x) for x in (layers, d_model, heads, image, patch, batch))
    o_args = {"n_layer": layers, "d_model": d_model, "n_head": heads, "image_size": image, "patch_size": patch}
    o = dit_reference.Options(**o_args)
    ema = {}

    def build(checkpoint):
        model = dit_reference.build(dtype=torch.float32, **o_args).to(device)  # pos_embed cast to f32
        if checkpoint:
            model.blocks = torch.nn.ModuleList([Checkpointed(b) for b in model.blocks])
        ema["weights"] = [p.detach().clone() for p in model.parameters()]
        return model

    def update_ema(model):  # as train.ema_decay: one lerp of every weight per step
        weights = [p.detach() for p in model.parameters()]
        if hasattr(torch, "_foreach_lerp_"):
            torch._foreach_lerp_(ema["weights"], weights, 1 - 0.9999)
        else:  # torch < 1.14 (the CPU machine's: a test of the script)
            for e, w in zip(ema["weights"], weights):
                e.lerp_(w, 1 - 0.9999)

    shape = (batch, o.in_channels, image, image)
    x0, noise = torch.randn(shape, device=device), torch.randn(shape, device=device)
    t = torch.randint(0, o.num_timesteps, (batch,), device=device)
    labels = torch.randint(0, o.num_classes, (batch,), device=device)
    r = train_steps(build, lambda model: model.loss(x0, noise, t, labels)[1], device, dtype, a, (0.9, 0.999), 0.0,
                    update_ema)
    return {"bench": "dit", "model": name, "dtype": dtype, "layers": layers, "d_model": d_model, "heads": heads,
            "batch": batch, "tokens": (image // patch) ** 2, **r, "samples_per_s": batch / (r["ms_per_step"] * 1e-3),
            "attention": "scaled_dot_product_attention" if HAS_SDPA else "naive (torch < 2.0)"}


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
    p.add_argument("--gemm", type=int, default=0, help="M = N = K of a square bf16 GEMM (0: none)")
    p.add_argument("--gemm-shape", type=gemm_shape, action="append", default=[], help="MxNxK of a bf16 GEMM")
    p.add_argument("--attention", type=attention_case, action="append", default=[],
                   help="B,N,H,d[,H_kv[,causal|full]] of a bf16 attention (repeatable)")
    p.add_argument("--sdpa-backends", action="store_true", help="time every SDPA backend, keep the fastest")
    p.add_argument("--gpt", action="append", default=[],
                   help="name,layers,d_model,heads,vocab,batch,seq,f32|bf16[,learned|rope]")
    p.add_argument("--dit", action="append", default=[], help="name,layers,d_model,heads,image_size,patch,batch,dtype")
    p.add_argument("--warmup", type=int, default=2, help="untimed GEMM / attention calls")
    p.add_argument("--iters", type=int, default=10, help="timed GEMM / attention calls (median)")
    p.add_argument("--gpt-warmup", type=int, default=3, help="untimed training steps (GPT and DiT)")
    p.add_argument("--gpt-steps", type=int, default=10, help="timed training steps (median)")
    a = p.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit("bench_torch_gpu: torch sees no CUDA device (use --device cpu to test the script)")
        torch.backends.cuda.matmul.allow_tf32 = False  # f32 as ours: TF32 off
        torch.backends.cudnn.allow_tf32 = False
    timer = Timer(device)
    print(json.dumps(versions(device)), flush=True)
    shapes = ([(a.gemm, a.gemm, a.gemm)] if a.gemm else []) + a.gemm_shape
    jobs = ([lambda s=s: bench_gemm(s, device, timer, a) for s in shapes] +
            [lambda c=c: bench_attention(c, device, timer, a) for c in a.attention] +
            [lambda g=g: bench_gpt(g, device, a) for g in a.gpt] + [lambda d=d: bench_dit(d, device, a) for d in a.dit])
    for job in jobs:  # one line each, out at once: a run cut short by a time limit keeps what it finished
        print(json.dumps(job()), flush=True)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
