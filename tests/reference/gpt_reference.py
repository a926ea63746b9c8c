#!/usr/bin/env python3
"""The decoder of models/decoder/decoder.cpp (GPT, LLaMA) in plain PyTorch (1.13, Debian's python3-torch).

    gpt_reference.py IN.safetensors OUT.safetensors [IN2 OUT2 ...] [--dtype float64|float32]

IN holds the model's parameters under our names ("blocks.0.attn.qkv.weight", ...), the batch
("inputs" [B, T] i64, "targets" [B, T] i64, "positions" [T] i64) and in "__metadata__" the model
options (DecoderOptions field names: vocab_size, n_layer, n_head, n_kv_head, d_model, d_ff, norm,
positions, rope_theta, tie_embeddings, bias, norm_eps, feed_forward). OUT receives "logits"
[B, T, V], "loss" (0-dim, mean cross-entropy over the targets that are not -100) and
"grad.<name>" for every parameter, in --dtype (default
float64: the reference is then exact to f32's rounding, so the comparison measures our error).
Several IN OUT pairs share one start of Python (importing torch takes seconds).
tests/models/test_gpt_reference.cpp writes IN and compares OUT; scripts/bench_gpt_torch.py
imports GptReference to time the same model.

Semantics, each confirmed against our sources:
  x = token_embedding.weight[ids] (+ position_embedding.weight[positions] when positions are learned)
  per block: h = x + attn(norm1(x)); x = h + mlp(norm2(h))                (nn/transformer_block.cpp)
  norms: LayerNorm (weight, bias) or RMSNorm x / sqrt(mean(x^2) + eps) * weight, eps 1e-5
                                                                           (kernels/cpu/norm.cpp)
  attn: qkv Linear(d, (h + 2 h_kv) hd), output rows grouped per kv head g: its h / h_kv query heads,
        key head g, value head g (so a tensor-parallel shard is whole groups);
        RoPE rotate-half on q and k at the given positions (kernels/cpu/rope.h); causal softmax over
        the token index (positions only feed RoPE/embeddings), scale 1/sqrt(hd); query head j
        reads kv head j // (h / h_kv); then proj Linear(d, d)             (nn/self_attention.cpp)
  mlp: proj(gelu_tanh(fc(x)))                              (nn/mlp.cpp, kernels/cpu/elementwise.cpp)
       or SwiGLU (LLaMA): down(silu(gate(x)) * up(x))                                 (nn/mlp.cpp)
  logits = final_norm(x) @ token_embedding.weight.T when tied, else lm_head (no bias)
Dropout is not modelled: the comparison runs with dropout 0.
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_safetensors import DTYPES, read_safetensors  # noqa: E402  (the shared reader)

DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


class Options:
    """GptOptions from a metadata dict of strings (or keyword arguments), with our defaults."""

    def __init__(self, meta=None, **kw):
        m = dict(meta or {})
        m.update({k: str(v) for k, v in kw.items()})
        self.vocab_size = int(m.get("vocab_size", 256))
        self.max_seq_len = int(m.get("max_seq_len", 1024))
        self.n_layer = int(m.get("n_layer", 4))
        self.n_head = int(m.get("n_head", 4))
        self.n_kv_head = int(m.get("n_kv_head", 0)) or self.n_head
        self.d_model = int(m.get("d_model", 256))
        self.d_ff = int(m.get("d_ff", 0)) or 4 * self.d_model
        self.norm = m.get("norm", "layer_norm")
        self.positions = m.get("positions", "learned")
        self.rope_theta = float(m.get("rope_theta", 10000.0))
        self.tie_embeddings = m.get("tie_embeddings", "true").lower() in ("1", "true")
        self.bias = m.get("bias", "true").lower() in ("1", "true")
        self.norm_eps = float(m.get("norm_eps", 1e-5))
        self.feed_forward = m.get("feed_forward", "mlp")
        assert self.feed_forward in ("mlp", "swiglu"), self.feed_forward
        assert self.norm in ("layer_norm", "rms_norm"), self.norm
        assert self.positions in ("learned", "rope"), self.positions


class Norm(torch.nn.Module):
    def __init__(self, o):
        super().__init__()
        self.kind, self.eps = o.norm, o.norm_eps
        self.weight = torch.nn.Parameter(torch.ones(o.d_model))
        if self.kind == "layer_norm":
            self.bias = torch.nn.Parameter(torch.zeros(o.d_model))

    def forward(self, x):
        if self.kind == "layer_norm":
            return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, positions, theta):
    """x [B, T, H, hd]; rotate-half: channel i pairs with i + hd/2, angle pos * theta^(-2i/hd)."""
    half = x.shape[-1] // 2
    inv_freq = theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / x.shape[-1])
    angle = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # [T, half], in double like ours
    cos = angle.cos().to(x.dtype)[None, :, None, :]
    sin = angle.sin().to(x.dtype)[None, :, None, :]
    lo, hi = x[..., :half], x[..., half:]
    return torch.cat([lo * cos - hi * sin, lo * sin + hi * cos], dim=-1)


class Attention(torch.nn.Module):
    def __init__(self, o):
        super().__init__()
        self.o = o
        self.hd = o.d_model // o.n_head
        self.qkv = torch.nn.Linear(o.d_model, (o.n_head + 2 * o.n_kv_head) * self.hd, bias=o.bias)
        self.proj = torch.nn.Linear(o.d_model, o.d_model, bias=o.bias)

    def forward(self, x, positions):
        o, hd = self.o, self.hd
        B, T, _ = x.shape
        group = o.n_head // o.n_kv_head  # query head j reads kv head j // group
        # Rows grouped per kv head: its `group` query heads, its key head, its value head.
        qkv = self.qkv(x).view(B, T, o.n_kv_head, group + 2, hd)
        q = qkv[:, :, :, :group].reshape(B, T, o.n_head, hd)
        k, v = qkv[:, :, :, group], qkv[:, :, :, group + 1]
        if o.positions == "rope":
            q, k = rope(q, positions, o.rope_theta), rope(k, positions, o.rope_theta)
        k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, T, hd]
        return self.proj(self.attend(q, k, v).transpose(1, 2).reshape(B, T, o.d_model))

    def attend(self, q, k, v):
        """Causal softmax(q kᵀ / sqrt(hd)) v on [B, H, T, hd] (scripts/bench_torch_gpu.py times SDPA instead)."""
        T = q.shape[2]
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.hd))
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        return s.masked_fill(mask, float("-inf")).softmax(-1) @ v


class MLP(torch.nn.Module):
    def __init__(self, o):
        super().__init__()
        self.fc = torch.nn.Linear(o.d_model, o.d_ff, bias=o.bias)
        self.proj = torch.nn.Linear(o.d_ff, o.d_model, bias=o.bias)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class SwiGLU(torch.nn.Module):
    def __init__(self, o):
        super().__init__()
        self.gate = torch.nn.Linear(o.d_model, o.d_ff, bias=o.bias)
        self.up = torch.nn.Linear(o.d_model, o.d_ff, bias=o.bias)
        self.down = torch.nn.Linear(o.d_ff, o.d_model, bias=o.bias)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(torch.nn.Module):
    def __init__(self, o):
        super().__init__()
        feed_forward = SwiGLU(o) if o.feed_forward == "swiglu" else MLP(o)
        self.norm1, self.attn, self.norm2, self.mlp = Norm(o), Attention(o), Norm(o), feed_forward

    def forward(self, x, positions):
        h = x + self.attn(self.norm1(x), positions)
        return h + self.mlp(self.norm2(h))


class GptReference(torch.nn.Module):
    """Parameter names are ours (named_parameters() matches Gpt::named_parameters())."""

    def __init__(self, o, init_std=0.02):
        super().__init__()
        self.o = o
        self.token_embedding = torch.nn.Embedding(o.vocab_size, o.d_model)
        if o.positions == "learned":
            self.position_embedding = torch.nn.Embedding(o.max_seq_len, o.d_model)
        self.blocks = torch.nn.ModuleList([Block(o) for _ in range(o.n_layer)])
        self.final_norm = Norm(o)
        if not o.tie_embeddings:
            self.lm_head = torch.nn.Linear(o.d_model, o.vocab_size, bias=False)
        for name, p in self.named_parameters():  # like ours: matrices N(0, std), biases 0, norms 1
            if p.dim() >= 2:
                torch.nn.init.normal_(p, std=init_std)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(p)

    def forward(self, ids, positions):
        x = self.token_embedding(ids)
        if self.o.positions == "learned":
            x = x + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x, positions)
        x = self.final_norm(x)
        return self.lm_head(x) if not self.o.tie_embeddings else x @ self.token_embedding.weight.t()

    def loss(self, ids, targets, positions):
        logits = self(ids, positions)
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def write_safetensors(path, tensors, metadata=None):
    """u64 LE header length | JSON header (space-padded to 8) | raw little-endian data."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        data = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def run(input_path, output_path, dtype):
    _, tensors, meta = read_safetensors(input_path)
    o = Options(meta)
    ids, targets, positions = tensors.pop("inputs"), tensors.pop("targets"), tensors.pop("positions")
    model = GptReference(o).to(dtype)
    params = dict(model.named_parameters())
    if set(params) != set(tensors):
        sys.exit(f"gpt_reference.py: parameter names differ; only ours: {sorted(set(tensors) - set(params))}, "
                 f"only the reference's: {sorted(set(params) - set(tensors))}")
    with torch.no_grad():
        for name, p in params.items():
            if p.shape != tensors[name].shape:
                sys.exit(f"gpt_reference.py: {name}: shape {list(tensors[name].shape)}, expected {list(p.shape)}")
            p.copy_(tensors[name].to(dtype))

    logits, loss = model.loss(ids, targets, positions)
    loss.backward()
    out = {"logits": logits, "loss": loss}
    out.update({"grad." + name: p.grad for name, p in params.items()})
    name = str(dtype).replace("torch.", "")
    write_safetensors(output_path, out, {"torch": torch.__version__, "dtype": name})
    print(f"gpt_reference.py: torch {torch.__version__} {name}, loss {loss.item():.9g}, "
          f"{len(params)} gradients -> {output_path}")


def main_over_pairs(description, run_pair):
    """The command line every reference shares: IN OUT pairs, run_pair(IN, OUT, dtype) on each."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("files", nargs="+", metavar="IN OUT")
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    args = parser.parse_args()
    if len(args.files) % 2:
        parser.error("give input and output files in pairs: IN OUT [IN OUT ...]")
    for i in range(0, len(args.files), 2):
        run_pair(args.files[i], args.files[i + 1], getattr(torch, args.dtype))
    return 0


if __name__ == "__main__":
    sys.exit(main_over_pairs(__doc__.split("\n")[0], run))
