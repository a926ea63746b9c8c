#!/usr/bin/env python3
"""DiT (Peebles & Xie) forward, diffusion training loss and gradients in plain PyTorch (1.13, Debian's python3-torch).

    dit_reference.py IN.safetensors OUT.safetensors [IN2 OUT2 ...] [--dtype float64|float32]

The model and losses of facebookresearch/DiT (models.py, diffusion/gaussian_diffusion.py), under
OUR parameter names and layouts, so a C++ test can compare our DiT with it.

IN holds the parameters under our names (f32; listed below), the batch ("x0" [B, C, H, W] f32 clean
images, "noise" [B, C, H, W] f32, "t" [B]: i64 timesteps in [0, num_timesteps) for ddpm, f32 in
[0, 1] for flow, "labels" [B] i64, already after classifier-free label dropout: the value
num_classes is the null class) and in "__metadata__" the options as strings: in_channels,
image_size (square H = W), patch_size, d_model, n_layer, n_head, mlp_ratio (float; MLP hidden =
int(d_model * mlp_ratio)), num_classes, class_dropout (float; the class table has num_classes + 1
rows when > 0), learn_sigma ("true"/"false"), diffusion ("ddpm" or "flow"), num_timesteps,
beta_start, beta_end. OUT receives "out" [B, C_out, H, W] (C_out = 2 C with learn_sigma, else C),
"loss" (0-dim) and "grad.<name>" for every parameter, in --dtype (default float64: the reference
is then exact to f32's rounding, so the comparison measures our error); its metadata also holds
the loss's two terms as strings ("mse", "vb"; vb is 0 without learn_sigma). Several IN OUT pairs
share one start of Python (importing torch takes seconds). build(meta) / DitReference are for
scripts that time the same model. tests/reference/dit_reference_selftest.py (run by hand) checks
this file against a re-implementation in the official layout (Conv2d patch embedding, timm qkv,
the official pos-embed and GaussianDiffusion functions) to 1e-10 in float64.

Semantics (D = d_model, p = patch_size, h = w = image_size / p, N = h w, hd = D / n_head):
  x_embedder (weight [D, C p p], bias [D]): a Linear on each p x p patch whose input vector is
      ordered (c, i, j), i.e. Conv2d(C, D, p, stride p) with weight.view(D, C, p, p); patches in
      row-major order (patch row, patch column).
  + fixed 2-D sin-cos position embedding (official get_2d_sincos_pos_embed(D, h), float64, then
      cast): channels [0, D/2) encode the patch COLUMN, [D/2, D) the patch ROW; each 1-D
      embedding is cat[sin(pos w_k), cos(pos w_k)], w_k = 1 / 10000^(k / (D/4)), k < D/4.
  t_embedder: freqs = exp(-ln(10000) k / 128), k < 128; emb = cat[cos(t freqs), sin(t freqs)]
      (256 channels, cos first), in the run dtype; fc2(silu(fc1(emb))). The timestep fed in is
      t for ddpm, t * 1000 for flow.
  y_embedder.weight [num_classes (+1), D]: c = t_embedder(t) + y_embedder.weight[labels].
  block (blocks.{i}.): (shift1, scale1, gate1, shift2, scale2, gate2) = adaLN(silu(c)).chunk(6)
      x = x + gate1 * attn(modulate(ln(x), shift1, scale1))
      x = x + gate2 * mlp(modulate(ln(x), shift2, scale2)),  modulate(x, s, k) = x (1 + k) + s
      ln: LayerNorm without parameters, eps 1e-6.
      attn: qkv Linear(D, 3D) whose output rows are GROUPED PER HEAD (unlike timm): head h owns
          rows [3 h hd, 3 (h+1) hd) = its q, then k, then v (hd rows each); full (non-causal)
          softmax attention, scale 1/sqrt(hd), heads concatenated in order, proj Linear(D, D).
      mlp: proj(gelu_tanh(fc(x))), fc Linear(D, hidden).
  final_layer: (shift, scale) = adaLN(silu(c)).chunk(2); linear(modulate(ln(x), shift, scale)),
      linear Linear(D, p p C_out) with each patch's outputs ordered (i, j, c); unpatchified as the
      official unpatchify: [B, h, w, p, p, c] -> 'nhwpqc->nchpwq' -> [B, c, h p, w p].
Loss, ddpm (official GaussianDiffusion.training_losses, LossType.MSE, epsilon prediction):
  betas = linspace(beta_start, beta_end, num_timesteps) and every schedule coefficient in float64
  (numpy, as official), each cast to the run dtype when taken at t; x_t = sqrt(abar_t) x0 +
  sqrt(1 - abar_t) noise; out = model(x_t, t, labels); eps = out[:, :C];
  mse_b = mean over C, H, W of (noise - eps)^2.
  learn_sigma (ModelVarType.LEARNED_RANGE): v = out[:, C:], eps_frozen = eps.detach();
      log_var = frac log(beta_t) + (1 - frac) posterior_log_variance_clipped_t, frac = (v + 1) / 2;
      pred_x0 = sqrt(1/abar_t) x_t - sqrt(1/abar_t - 1) eps_frozen (no clipping in training);
      mean = posterior_mean_coef1_t pred_x0 + posterior_mean_coef2_t x_t;
      vb_b = t > 0: mean over C, H, W of normal_kl(q posterior mean, its clipped log variance,
                    mean, log_var) / ln 2
             t = 0: mean over C, H, W of -discretized_gaussian_log_likelihood(x0, mean,
                    0.5 log_var) / ln 2 (tanh CDF approximation, bins +-1/255, edges at +-0.999,
                    logs of values clamped at 1e-12)
  loss = mean over the batch of (mse_b + vb_b) (vb_b = 0 without learn_sigma).
Loss, flow (rectified flow; learn_sigma must be false): x_t = (1 - t) x0 + t noise (t per sample),
  out = model(x_t, 1000 t, labels), loss = mean((out - (noise - x0))^2) over every element.
Dropout is not modelled: label dropout happened before IN (the labels given are used as they are).
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_safetensors import read_safetensors  # noqa: E402  (the shared reader)
from gpt_reference import main_over_pairs, write_safetensors  # noqa: E402  (shared with the GPT reference)

FREQUENCY_CHANNELS = 256  # the official TimestepEmbedder's frequency_embedding_size
LN_EPS = 1e-6


def _flag(text):
    value = str(text).strip().lower()
    if value not in ("1", "0", "true", "false"):
        raise ValueError(f"expected true/false, got {text!r}")
    return value in ("1", "true")


class Options:
    """DiT options from a metadata dict of strings (or keyword arguments); defaults DiT-S/2 on 32x32x4 latents."""

    def __init__(self, meta=None, **kw):
        m = dict(meta or {})
        m.update({k: str(v) for k, v in kw.items()})
        self.in_channels = int(m.get("in_channels", 4))
        self.image_size = int(m.get("image_size", 32))
        self.patch_size = int(m.get("patch_size", 2))
        self.d_model = int(m.get("d_model", 384))
        self.n_layer = int(m.get("n_layer", 12))
        self.n_head = int(m.get("n_head", 6))
        self.mlp_ratio = float(m.get("mlp_ratio", 4.0))
        self.num_classes = int(m.get("num_classes", 1000))
        self.class_dropout = float(m.get("class_dropout", 0.1))
        self.learn_sigma = _flag(m.get("learn_sigma", "true"))
        self.diffusion = m.get("diffusion", "ddpm")
        self.num_timesteps = int(m.get("num_timesteps", 1000))
        self.beta_start = float(m.get("beta_start", 1e-4))
        self.beta_end = float(m.get("beta_end", 0.02))

        self.hidden = int(self.d_model * self.mlp_ratio)  # as the official DiTBlock
        self.out_channels = 2 * self.in_channels if self.learn_sigma else self.in_channels
        self.grid = self.image_size // self.patch_size
        self.class_rows = self.num_classes + (1 if self.class_dropout > 0 else 0)
        if self.diffusion not in ("ddpm", "flow"):
            raise ValueError(f"diffusion must be ddpm or flow, got {self.diffusion!r}")
        if self.diffusion == "flow" and self.learn_sigma:
            raise ValueError("learn_sigma needs diffusion ddpm (flow has no variance to learn)")
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size {self.image_size} is not a multiple of patch_size {self.patch_size}")
        if self.d_model % 4:
            raise ValueError(f"d_model {self.d_model} is not a multiple of 4 (2-D sin-cos position embedding)")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model {self.d_model} is not a multiple of n_head {self.n_head}")
        if self.diffusion == "ddpm" and self.num_timesteps < 2:
            raise ValueError("ddpm needs num_timesteps >= 2 (the clipped posterior variance reads step 1)")


def pos_embed_2d(d_model, grid):
    """[grid*grid, d_model] float64; token n = row * grid + col; channels [0, D/2) the column, [D/2, D) the row."""
    quarter = d_model // 4
    omega = 1.0 / 10000.0 ** (torch.arange(quarter, dtype=torch.float64) / quarter)
    index = torch.arange(grid * grid)
    row, col = (index // grid).to(torch.float64), (index % grid).to(torch.float64)

    def one_d(pos):
        angle = pos[:, None] * omega[None, :]
        return torch.cat([angle.sin(), angle.cos()], dim=1)

    return torch.cat([one_d(col), one_d(row)], dim=1)


def timestep_frequencies(t, dtype, channels=FREQUENCY_CHANNELS, max_period=10000):
    """[B, channels]: cat[cos(t f_k), sin(t f_k)], f_k = exp(-ln(max_period) k / half), in `dtype`."""
    half = channels // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=dtype) / half)
    args = t.to(dtype)[:, None] * freqs[None, :]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def modulate(x, shift, scale):
    return x * (1 + scale[:, None]) + shift[:, None]


def layer_norm(x):
    return F.layer_norm(x, x.shape[-1:], None, None, LN_EPS)


class TimestepEmbedder(torch.nn.Module):
    def __init__(self, o):
        super().__init__()
        self.fc1 = torch.nn.Linear(FREQUENCY_CHANNELS, o.d_model)
        self.fc2 = torch.nn.Linear(o.d_model, o.d_model)

    def forward(self, t):
        return self.fc2(F.silu(self.fc1(timestep_frequencies(t, self.fc1.weight.dtype))))


class Attention(torch.nn.Module):
    def __init__(self, o):
        super().__init__()
        self.n_head, self.hd = o.n_head, o.d_model // o.n_head
        self.qkv = torch.nn.Linear(o.d_model, 3 * o.d_model)
        self.proj = torch.nn.Linear(o.d_model, o.d_model)

    def forward(self, x):
        B, N, D = x.shape
        # Rows grouped per head: head h's q, k, v are rows [3 h hd, 3 (h+1) hd) in that order.
        qkv = self.qkv(x).view(B, N, self.n_head, 3, self.hd)
        q, k, v = (qkv[:, :, :, j].transpose(1, 2) for j in range(3))  # [B, heads, N, hd]
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.hd))
        return self.proj((s.softmax(-1) @ v).transpose(1, 2).reshape(B, N, D))


class MLP(torch.nn.Module):
    def __init__(self, o):
        super().__init__()
        self.fc = torch.nn.Linear(o.d_model, o.hidden)
        self.proj = torch.nn.Linear(o.hidden, o.d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(torch.nn.Module):
    def __init__(self, o):
        super().__init__()
        self.adaLN = torch.nn.Linear(o.d_model, 6 * o.d_model)
        self.attn, self.mlp = Attention(o), MLP(o)

    def forward(self, x, c):
        shift1, scale1, gate1, shift2, scale2, gate2 = self.adaLN(F.silu(c)).chunk(6, dim=1)
        x = x + gate1[:, None] * self.attn(modulate(layer_norm(x), shift1, scale1))
        return x + gate2[:, None] * self.mlp(modulate(layer_norm(x), shift2, scale2))


class FinalLayer(torch.nn.Module):
    def __init__(self, o):
        super().__init__()
        self.adaLN = torch.nn.Linear(o.d_model, 2 * o.d_model)
        self.linear = torch.nn.Linear(o.d_model, o.patch_size * o.patch_size * o.out_channels)

    def forward(self, x, c):
        shift, scale = self.adaLN(F.silu(c)).chunk(2, dim=1)
        return self.linear(modulate(layer_norm(x), shift, scale))


class DdpmSchedule:
    """The official GaussianDiffusion's coefficients, float64 numpy; at(name, t, dtype) -> [B, 1, 1, 1]."""

    def __init__(self, o):
        betas = np.linspace(o.beta_start, o.beta_end, o.num_timesteps, dtype=np.float64)
        if not ((betas > 0).all() and (betas <= 1).all()):
            raise ValueError(f"betas must lie in (0, 1]: beta_start {o.beta_start}, beta_end {o.beta_end}")
        self.betas = betas
        alphas = 1.0 - betas
        abar = np.cumprod(alphas)
        abar_prev = np.append(1.0, abar[:-1])
        posterior_variance = betas * (1.0 - abar_prev) / (1.0 - abar)
        self.coef = {
            "sqrt_abar": np.sqrt(abar),
            "sqrt_one_minus_abar": np.sqrt(1.0 - abar),
            "sqrt_recip_abar": np.sqrt(1.0 / abar),
            "sqrt_recipm1_abar": np.sqrt(1.0 / abar - 1.0),
            "posterior_log_variance_clipped": np.log(np.append(posterior_variance[1], posterior_variance[1:])),
            "posterior_mean_coef1": betas * np.sqrt(abar_prev) / (1.0 - abar),
            "posterior_mean_coef2": (1.0 - abar_prev) * np.sqrt(alphas) / (1.0 - abar),
            "log_betas": np.log(betas),
        }

    def at(self, name, t, dtype):
        return torch.from_numpy(self.coef[name])[t].to(dtype)[:, None, None, None]


def normal_kl(mean1, logvar1, mean2, logvar2):
    """KL(N(mean1, e^logvar1) || N(mean2, e^logvar2)) elementwise, in nats."""
    return 0.5 * (-1.0 + logvar2 - logvar1 + torch.exp(logvar1 - logvar2)
                  + (mean1 - mean2) ** 2 * torch.exp(-logvar2))


def approx_standard_normal_cdf(x):
    return 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def discretized_gaussian_log_likelihood(x, means, log_scales):
    """log P(bin of x) under N(means, e^(2 log_scales)), bins of half-width 1/255, open ends past +-0.999."""
    centered = x - means
    inv_stdv = torch.exp(-log_scales)
    cdf_plus = approx_standard_normal_cdf(inv_stdv * (centered + 1.0 / 255.0))
    cdf_min = approx_standard_normal_cdf(inv_stdv * (centered - 1.0 / 255.0))
    log_cdf_plus = torch.log(cdf_plus.clamp(min=1e-12))
    log_one_minus_cdf_min = torch.log((1.0 - cdf_min).clamp(min=1e-12))
    log_delta = torch.log((cdf_plus - cdf_min).clamp(min=1e-12))
    return torch.where(x < -0.999, log_cdf_plus, torch.where(x > 0.999, log_one_minus_cdf_min, log_delta))


class DitReference(torch.nn.Module):
    """Parameter names are ours (named_parameters() is the list in IN); pos_embed is a buffer, not a parameter."""

    def __init__(self, o):
        super().__init__()
        self.o = o
        p, D = o.patch_size, o.d_model
        self.x_embedder = torch.nn.Linear(o.in_channels * p * p, D)
        self.t_embedder = TimestepEmbedder(o)
        self.y_embedder = torch.nn.Embedding(o.class_rows, D)
        self.blocks = torch.nn.ModuleList([Block(o) for _ in range(o.n_layer)])
        self.final_layer = FinalLayer(o)
        self.register_buffer("pos_embed", pos_embed_2d(D, o.grid), persistent=False)  # cast by .to(dtype)
        self.schedule = DdpmSchedule(o) if o.diffusion == "ddpm" else None
        self.initialize_weights()

    def initialize_weights(self):
        """The official initialize_weights: xavier_uniform Linears, zero biases, N(0, 0.02) class table and
        timestep MLP, zero adaLN and final linear (so a fresh model outputs 0: tests load random weights)."""
        for m in self.modules():
            if isinstance(m, torch.nn.Linear):
                torch.nn.init.xavier_uniform_(m.weight)
                torch.nn.init.zeros_(m.bias)
        torch.nn.init.normal_(self.y_embedder.weight, std=0.02)
        torch.nn.init.normal_(self.t_embedder.fc1.weight, std=0.02)
        torch.nn.init.normal_(self.t_embedder.fc2.weight, std=0.02)
        zero = [b.adaLN for b in self.blocks] + [self.final_layer.adaLN, self.final_layer.linear]
        for m in zero:
            torch.nn.init.zeros_(m.weight)
            torch.nn.init.zeros_(m.bias)

    def patchify(self, x):
        """[B, C, H, W] -> [B, N, C p p]: patches row-major, each vector ordered (c, i, j)."""
        B, C, H, W = x.shape
        p, g = self.o.patch_size, self.o.grid
        return x.reshape(B, C, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(B, g * g, C * p * p)

    def unpatchify(self, x):
        """[B, N, p p C_out] (each vector ordered (i, j, c)) -> [B, C_out, H, W]."""
        B = x.shape[0]
        p, g, c = self.o.patch_size, self.o.grid, self.o.out_channels
        return x.reshape(B, g, g, p, p, c).permute(0, 5, 1, 3, 2, 4).reshape(B, c, g * p, g * p)

    def forward(self, x, t, labels):
        """x [B, C, H, W], t [B] (the value fed to the timestep embedding), labels [B] -> [B, C_out, H, W]."""
        o = self.o
        if tuple(x.shape[1:]) != (o.in_channels, o.image_size, o.image_size):
            raise ValueError(f"x has shape {list(x.shape)}, "
                             f"expected [B, {o.in_channels}, {o.image_size}, {o.image_size}]")
        x = self.x_embedder(self.patchify(x.to(self.pos_embed.dtype))) + self.pos_embed
        c = self.t_embedder(t) + self.y_embedder(labels)
        for block in self.blocks:
            x = block(x, c)
        return self.unpatchify(self.final_layer(x, c))

    def noised(self, x0, noise, t):
        """-> (x_t, the timestep value fed to the model) in the run dtype; checks t."""
        o, dtype = self.o, self.pos_embed.dtype
        x0, noise = x0.to(dtype), noise.to(dtype)
        if o.diffusion == "flow":
            if not t.is_floating_point() or t.numel() and (t.min() < 0 or t.max() > 1):
                raise ValueError("flow: t must be floating point in [0, 1]")
            s = t.to(dtype)[:, None, None, None]
            return (1 - s) * x0 + s * noise, t.to(dtype) * 1000
        if t.dtype != torch.int64 or t.numel() and (t.min() < 0 or t.max() >= o.num_timesteps):
            raise ValueError(f"ddpm: t must be int64 in [0, {o.num_timesteps})")
        at = lambda name: self.schedule.at(name, t, dtype)  # noqa: E731
        return at("sqrt_abar") * x0 + at("sqrt_one_minus_abar") * noise, t

    def loss(self, x0, noise, t, labels):
        """-> (out, loss, terms): the model output at x_t, the training loss, {"mse", "vb"} (0-dim each)."""
        o, dtype = self.o, self.pos_embed.dtype
        C = o.in_channels
        if labels.dtype != torch.int64 or labels.numel() and (labels.min() < 0 or labels.max() >= o.class_rows):
            raise ValueError(f"labels must be int64 in [0, {o.class_rows})")
        x0, noise = x0.to(dtype), noise.to(dtype)
        x_t, model_t = self.noised(x0, noise, t)
        out = self(x_t, model_t, labels)
        if o.diffusion == "flow":
            mse = ((out[:, :C] - (noise - x0)) ** 2).mean()
            return out, mse, {"mse": mse, "vb": torch.zeros((), dtype=dtype)}
        eps = out[:, :C]
        mse = ((noise - eps) ** 2).mean(dim=(1, 2, 3))
        vb = torch.zeros_like(mse)
        if o.learn_sigma:  # the bound trains the variance only: eps enters it detached
            vb = self.vb_terms(x0, x_t, t, eps.detach(), out[:, C:])
        return out, (mse + vb).mean(), {"mse": mse.mean(), "vb": vb.mean()}

    def vb_terms(self, x0, x_t, t, eps, v):
        """[B] variational-bound terms in bits per dimension (official _vb_terms_bpd, LEARNED_RANGE,
        epsilon prediction, no clipping) for the model's eps and variance output v."""
        dtype = self.pos_embed.dtype
        at = lambda name: self.schedule.at(name, t, dtype)  # noqa: E731
        frac = (v + 1) / 2
        min_log = at("posterior_log_variance_clipped")
        log_var = frac * at("log_betas") + (1 - frac) * min_log
        pred_x0 = at("sqrt_recip_abar") * x_t - at("sqrt_recipm1_abar") * eps
        mean = at("posterior_mean_coef1") * pred_x0 + at("posterior_mean_coef2") * x_t
        true_mean = at("posterior_mean_coef1") * x0 + at("posterior_mean_coef2") * x_t
        kl = normal_kl(true_mean, min_log, mean, log_var).mean(dim=(1, 2, 3)) / math.log(2.0)
        nll = -discretized_gaussian_log_likelihood(x0, mean, 0.5 * log_var).mean(dim=(1, 2, 3)) / math.log(2.0)
        return torch.where(t == 0, nll, kl)


def build(meta=None, dtype=torch.float32, **kw):
    """DitReference from metadata strings (or keyword options), officially initialised, in `dtype`."""
    return DitReference(Options(meta, **kw)).to(dtype)


def run(input_path, output_path, dtype):
    _, tensors, meta = read_safetensors(input_path)
    for key in ("x0", "noise", "t", "labels"):
        if key not in tensors:
            sys.exit(f"dit_reference.py: {input_path} has no {key!r}")
    x0, noise, t, labels = (tensors.pop(k) for k in ("x0", "noise", "t", "labels"))
    try:
        model = build(meta, dtype)
    except ValueError as e:
        sys.exit(f"dit_reference.py: {input_path}: {e}")
    params = dict(model.named_parameters())
    if set(params) != set(tensors):
        sys.exit(f"dit_reference.py: parameter names differ; only ours: {sorted(set(tensors) - set(params))}, "
                 f"only the reference's: {sorted(set(params) - set(tensors))}")
    with torch.no_grad():
        for name, p in params.items():
            if p.shape != tensors[name].shape:
                sys.exit(f"dit_reference.py: {name}: shape {list(tensors[name].shape)}, expected {list(p.shape)}")
            p.copy_(tensors[name].to(dtype))
    if x0.shape != noise.shape or t.shape != (x0.shape[0],) or labels.shape != (x0.shape[0],):
        sys.exit(f"dit_reference.py: shapes x0 {list(x0.shape)}, noise {list(noise.shape)}, t {list(t.shape)}, "
                 f"labels {list(labels.shape)} do not fit")

    try:
        out, loss, terms = model.loss(x0, noise, t, labels)
    except ValueError as e:
        sys.exit(f"dit_reference.py: {input_path}: {e}")
    loss.backward()
    result = {"out": out, "loss": loss}
    result.update({"grad." + name: p.grad for name, p in params.items()})
    name = str(dtype).replace("torch.", "")
    write_safetensors(output_path, result, {"torch": torch.__version__, "dtype": name,
                                            "mse": repr(terms["mse"].item()), "vb": repr(terms["vb"].item())})
    print(f"dit_reference.py: torch {torch.__version__} {name}, {model.o.diffusion}"
          f"{' learn_sigma' if model.o.learn_sigma else ''}, loss {loss.item():.9g}, "
          f"{len(params)} gradients -> {output_path}")


if __name__ == "__main__":
    sys.exit(main_over_pairs(__doc__.split("\n")[0], run))
