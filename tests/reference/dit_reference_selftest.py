#!/usr/bin/env python3
"""Checks tests/reference/dit_reference.py against an independent DiT in the OFFICIAL layout. Run by hand:

    /usr/bin/python3 tests/reference/dit_reference_selftest.py

The official side is facebookresearch/DiT's models.py (Conv2d PatchEmbed, timm's Attention with its
qkv.reshape(B, N, 3, heads, hd), timm's Mlp, nn.Sequential t_embedder and adaLN_modulation,
get_2d_sincos_pos_embed copied as is, unpatchify with its einsum) and diffusion/gaussian_diffusion.py
+ diffusion_utils.py (GaussianDiffusion.training_losses with LossType.MSE, EPSILON,
LEARNED_RANGE; normal_kl, approx_standard_normal_cdf, discretized_gaussian_log_likelihood as
written there), with weights converted from our names and layouts. Three deliberate departures,
all about precision only: timestep_embedding and _extract_into_tensor compute in the run dtype
instead of float32 (the official code calls .float()), and pos_embed is kept in float64 before the
cast to the run dtype (the official parameter is float32), else float64 could not agree to 1e-10.
timm is not installed (Debian), so its PatchEmbed / Attention / Mlp are written out below as
timm 0.6 has them. Rectified flow is not in the DiT repository; its loss is written out directly.

Checks, printing each: the position embedding; for several configurations (ddpm with and without
learn_sigma, t including 0, 1 and the last step, a non-default schedule, flow with t 0 and 1,
class_dropout 0 and > 0, an mlp_ratio that truncates) with random non-zero weights (the official
zero-init of adaLN would make the comparison trivial): out, loss, its mse / vb terms and every
gradient from `dit_reference.py IN OUT ...` (one process, several pairs, through safetensors
files) agree with the official layout to 1e-10 (relative to max(1, max |official|)) in float64;
the --dtype float32 run agrees with float64 to 1e-3; flow with learn_sigma is refused; and
torch.autograd.gradcheck of out and loss for a few parameters on a tiny float64 model. Exits
non-zero on any failure.
"""
import enum
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch as th
import torch.nn as nn

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dit_reference  # noqa: E402
from gpt_reference import write_safetensors  # noqa: E402
from read_safetensors import read_safetensors  # noqa: E402

TOLERANCE = 1e-10
failures = []


def check(ok, what):
    print(("  ok    " if ok else "  FAIL  ") + what)
    if not ok:
        failures.append(what)


# ------------------------------------------------------------------------------------------------
# The official model (facebookresearch/DiT models.py; timm 0.6 PatchEmbed / Attention / Mlp).
# ------------------------------------------------------------------------------------------------

def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class PatchEmbed(nn.Module):  # timm.models.layers.PatchEmbed, flatten=True, norm_layer=None
    def __init__(self, img_size, patch_size, in_chans, embed_dim, bias=True):
        super().__init__()
        self.patch_size = (patch_size, patch_size)
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size, bias=bias)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)  # BCHW -> BNC


class Attention(nn.Module):  # timm.models.vision_transformer.Attention
    def __init__(self, dim, num_heads=8, qkv_bias=False):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Mlp(nn.Module):  # timm.models.layers.Mlp (drop 0)
    def __init__(self, in_features, hidden_features, act_layer):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_features, in_features)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden_size, frequency_embedding_size=256):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(frequency_embedding_size, hidden_size, bias=True),
            nn.SiLU(),
            nn.Linear(hidden_size, hidden_size, bias=True),
        )
        self.frequency_embedding_size = frequency_embedding_size

    @staticmethod
    def timestep_embedding(t, dim, max_period=10000, dtype=torch.float32):
        # Official, but in `dtype` where it has torch.float32 / .float().
        half = dim // 2
        freqs = torch.exp(
            -math.log(max_period) * torch.arange(start=0, end=half, dtype=dtype) / half
        ).to(device=t.device)
        args = t[:, None].to(dtype) * freqs[None]
        embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if dim % 2:
            embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
        return embedding

    def forward(self, t):
        t_freq = self.timestep_embedding(t, self.frequency_embedding_size, dtype=self.mlp[0].weight.dtype)
        return self.mlp(t_freq)


class LabelEmbedder(nn.Module):
    def __init__(self, num_classes, hidden_size, dropout_prob):
        super().__init__()
        use_cfg_embedding = dropout_prob > 0
        self.embedding_table = nn.Embedding(num_classes + use_cfg_embedding, hidden_size)
        self.num_classes = num_classes
        self.dropout_prob = dropout_prob

    def forward(self, labels, train, force_drop_ids=None):
        assert not train and force_drop_ids is None  # the labels come already dropped
        return self.embedding_table(labels)


class DiTBlock(nn.Module):
    def __init__(self, hidden_size, num_heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden_size, num_heads=num_heads, qkv_bias=True)
        self.norm2 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        mlp_hidden_dim = int(hidden_size * mlp_ratio)
        approx_gelu = lambda: nn.GELU(approximate="tanh")  # noqa: E731
        self.mlp = Mlp(in_features=hidden_size, hidden_features=mlp_hidden_dim, act_layer=approx_gelu)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 6 * hidden_size, bias=True))

    def forward(self, x, c):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + gate_msa.unsqueeze(1) * self.attn(modulate(self.norm1(x), shift_msa, scale_msa))
        x = x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))
        return x


class FinalLayer(nn.Module):
    def __init__(self, hidden_size, patch_size, out_channels):
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden_size, patch_size * patch_size * out_channels, bias=True)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 2 * hidden_size, bias=True))

    def forward(self, x, c):
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        x = modulate(self.norm_final(x), shift, scale)
        return self.linear(x)


class DiT(nn.Module):
    def __init__(self, input_size=32, patch_size=2, in_channels=4, hidden_size=1152, depth=28, num_heads=16,
                 mlp_ratio=4.0, class_dropout_prob=0.1, num_classes=1000, learn_sigma=True):
        super().__init__()
        self.learn_sigma = learn_sigma
        self.in_channels = in_channels
        self.out_channels = in_channels * 2 if learn_sigma else in_channels
        self.patch_size = patch_size
        self.num_heads = num_heads
        self.x_embedder = PatchEmbed(input_size, patch_size, in_channels, hidden_size, bias=True)
        self.t_embedder = TimestepEmbedder(hidden_size)
        self.y_embedder = LabelEmbedder(num_classes, hidden_size, class_dropout_prob)
        num_patches = self.x_embedder.num_patches
        # float64 here (official: float32 zeros, filled with .float()), so that .to(dtype) keeps float64 exact.
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches, hidden_size, dtype=torch.float64),
                                      requires_grad=False)
        self.blocks = nn.ModuleList([DiTBlock(hidden_size, num_heads, mlp_ratio=mlp_ratio) for _ in range(depth)])
        self.final_layer = FinalLayer(hidden_size, patch_size, self.out_channels)
        pos_embed = get_2d_sincos_pos_embed(self.pos_embed.shape[-1], int(self.x_embedder.num_patches ** 0.5))
        self.pos_embed.data.copy_(torch.from_numpy(pos_embed).unsqueeze(0))  # float64 kept; .to(dtype) casts

    def unpatchify(self, x):
        c = self.out_channels
        p = self.x_embedder.patch_size[0]
        h = w = int(x.shape[1] ** 0.5)
        assert h * w == x.shape[1]
        x = x.reshape(shape=(x.shape[0], h, w, p, p, c))
        x = torch.einsum('nhwpqc->nchpwq', x)
        imgs = x.reshape(shape=(x.shape[0], c, h * p, h * p))
        return imgs

    def forward(self, x, t, y):
        x = self.x_embedder(x) + self.pos_embed
        t = self.t_embedder(t)
        y = self.y_embedder(y, self.training)
        c = t + y
        for block in self.blocks:
            x = block(x, c)
        x = self.final_layer(x, c)
        return self.unpatchify(x)


# https://github.com/facebookresearch/mae/blob/main/util/pos_embed.py, as in DiT's models.py
def get_2d_sincos_pos_embed(embed_dim, grid_size, cls_token=False, extra_tokens=0):
    grid_h = np.arange(grid_size, dtype=np.float32)
    grid_w = np.arange(grid_size, dtype=np.float32)
    grid = np.meshgrid(grid_w, grid_h)  # here w goes first
    grid = np.stack(grid, axis=0)
    grid = grid.reshape([2, 1, grid_size, grid_size])
    pos_embed = get_2d_sincos_pos_embed_from_grid(embed_dim, grid)
    if cls_token and extra_tokens > 0:
        pos_embed = np.concatenate([np.zeros([extra_tokens, embed_dim]), pos_embed], axis=0)
    return pos_embed


def get_2d_sincos_pos_embed_from_grid(embed_dim, grid):
    assert embed_dim % 2 == 0
    emb_h = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[0])  # (H*W, D/2)
    emb_w = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[1])  # (H*W, D/2)
    emb = np.concatenate([emb_h, emb_w], axis=1)  # (H*W, D)
    return emb


def get_1d_sincos_pos_embed_from_grid(embed_dim, pos):
    assert embed_dim % 2 == 0
    omega = np.arange(embed_dim // 2, dtype=np.float64)
    omega /= embed_dim / 2.
    omega = 1. / 10000**omega  # (D/2,)
    pos = pos.reshape(-1)  # (M,)
    out = np.einsum('m,d->md', pos, omega)  # (M, D/2), outer product
    emb_sin = np.sin(out)  # (M, D/2)
    emb_cos = np.cos(out)  # (M, D/2)
    emb = np.concatenate([emb_sin, emb_cos], axis=1)  # (M, D)
    return emb


# ------------------------------------------------------------------------------------------------
# The official diffusion (diffusion/diffusion_utils.py, diffusion/gaussian_diffusion.py), the parts
# training_losses reaches.
# ------------------------------------------------------------------------------------------------

def normal_kl(mean1, logvar1, mean2, logvar2):
    tensor = None
    for obj in (mean1, logvar1, mean2, logvar2):
        if isinstance(obj, th.Tensor):
            tensor = obj
            break
    assert tensor is not None, "at least one argument must be a Tensor"
    logvar1, logvar2 = [
        x if isinstance(x, th.Tensor) else th.tensor(x).to(tensor)
        for x in (logvar1, logvar2)
    ]
    return 0.5 * (
        -1.0
        + logvar2
        - logvar1
        + th.exp(logvar1 - logvar2)
        + ((mean1 - mean2) ** 2) * th.exp(-logvar2)
    )


def approx_standard_normal_cdf(x):
    return 0.5 * (1.0 + th.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * th.pow(x, 3))))


def discretized_gaussian_log_likelihood(x, *, means, log_scales):
    assert x.shape == means.shape == log_scales.shape
    centered_x = x - means
    inv_stdv = th.exp(-log_scales)
    plus_in = inv_stdv * (centered_x + 1.0 / 255.0)
    cdf_plus = approx_standard_normal_cdf(plus_in)
    min_in = inv_stdv * (centered_x - 1.0 / 255.0)
    cdf_min = approx_standard_normal_cdf(min_in)
    log_cdf_plus = th.log(cdf_plus.clamp(min=1e-12))
    log_one_minus_cdf_min = th.log((1.0 - cdf_min).clamp(min=1e-12))
    cdf_delta = cdf_plus - cdf_min
    log_probs = th.where(
        x < -0.999,
        log_cdf_plus,
        th.where(x > 0.999, log_one_minus_cdf_min, th.log(cdf_delta.clamp(min=1e-12))),
    )
    assert log_probs.shape == x.shape
    return log_probs


def mean_flat(tensor):
    return tensor.mean(dim=list(range(1, len(tensor.shape))))


class ModelMeanType(enum.Enum):
    PREVIOUS_X = enum.auto()
    START_X = enum.auto()
    EPSILON = enum.auto()


class ModelVarType(enum.Enum):
    LEARNED = enum.auto()
    FIXED_SMALL = enum.auto()
    FIXED_LARGE = enum.auto()
    LEARNED_RANGE = enum.auto()


class LossType(enum.Enum):
    MSE = enum.auto()
    RESCALED_MSE = enum.auto()
    KL = enum.auto()
    RESCALED_KL = enum.auto()


def get_beta_schedule(beta_schedule, *, beta_start, beta_end, num_diffusion_timesteps):
    assert beta_schedule == "linear"
    betas = np.linspace(beta_start, beta_end, num_diffusion_timesteps, dtype=np.float64)
    assert betas.shape == (num_diffusion_timesteps,)
    return betas


def get_named_beta_schedule(schedule_name, num_diffusion_timesteps):
    assert schedule_name == "linear"
    scale = 1000 / num_diffusion_timesteps
    return get_beta_schedule("linear", beta_start=scale * 0.0001, beta_end=scale * 0.02,
                             num_diffusion_timesteps=num_diffusion_timesteps)


def _extract_into_tensor(arr, timesteps, broadcast_shape, dtype):
    # Official, but .to(dtype) where it has .float(), and zeros in `dtype`.
    res = th.from_numpy(arr).to(device=timesteps.device)[timesteps].to(dtype)
    while len(res.shape) < len(broadcast_shape):
        res = res[..., None]
    return res + th.zeros(broadcast_shape, device=timesteps.device, dtype=dtype)


class GaussianDiffusion:
    def __init__(self, *, betas, model_mean_type, model_var_type, loss_type, dtype):
        self.model_mean_type = model_mean_type
        self.model_var_type = model_var_type
        self.loss_type = loss_type
        self.dtype = dtype
        betas = np.array(betas, dtype=np.float64)
        self.betas = betas
        assert len(betas.shape) == 1, "betas must be 1-D"
        assert (betas > 0).all() and (betas <= 1).all()
        self.num_timesteps = int(betas.shape[0])
        alphas = 1.0 - betas
        self.alphas_cumprod = np.cumprod(alphas, axis=0)
        self.alphas_cumprod_prev = np.append(1.0, self.alphas_cumprod[:-1])
        self.alphas_cumprod_next = np.append(self.alphas_cumprod[1:], 0.0)
        self.sqrt_alphas_cumprod = np.sqrt(self.alphas_cumprod)
        self.sqrt_one_minus_alphas_cumprod = np.sqrt(1.0 - self.alphas_cumprod)
        self.log_one_minus_alphas_cumprod = np.log(1.0 - self.alphas_cumprod)
        self.sqrt_recip_alphas_cumprod = np.sqrt(1.0 / self.alphas_cumprod)
        self.sqrt_recipm1_alphas_cumprod = np.sqrt(1.0 / self.alphas_cumprod - 1)
        self.posterior_variance = (
            betas * (1.0 - self.alphas_cumprod_prev) / (1.0 - self.alphas_cumprod)
        )
        self.posterior_log_variance_clipped = np.log(
            np.append(self.posterior_variance[1], self.posterior_variance[1:])
        ) if len(self.posterior_variance) > 1 else np.array([])
        self.posterior_mean_coef1 = (
            betas * np.sqrt(self.alphas_cumprod_prev) / (1.0 - self.alphas_cumprod)
        )
        self.posterior_mean_coef2 = (
            (1.0 - self.alphas_cumprod_prev) * np.sqrt(alphas) / (1.0 - self.alphas_cumprod)
        )

    def _x(self, arr, t, shape):
        return _extract_into_tensor(arr, t, shape, self.dtype)

    def q_sample(self, x_start, t, noise=None):
        assert noise.shape == x_start.shape
        return (
            self._x(self.sqrt_alphas_cumprod, t, x_start.shape) * x_start
            + self._x(self.sqrt_one_minus_alphas_cumprod, t, x_start.shape) * noise
        )

    def q_posterior_mean_variance(self, x_start, x_t, t):
        assert x_start.shape == x_t.shape
        posterior_mean = (
            self._x(self.posterior_mean_coef1, t, x_t.shape) * x_start
            + self._x(self.posterior_mean_coef2, t, x_t.shape) * x_t
        )
        posterior_variance = self._x(self.posterior_variance, t, x_t.shape)
        posterior_log_variance_clipped = self._x(self.posterior_log_variance_clipped, t, x_t.shape)
        return posterior_mean, posterior_variance, posterior_log_variance_clipped

    def p_mean_variance(self, model, x, t, clip_denoised=True, denoised_fn=None, model_kwargs=None):
        if model_kwargs is None:
            model_kwargs = {}
        B, C = x.shape[:2]
        assert t.shape == (B,)
        model_output = model(x, t, **model_kwargs)
        extra = None
        if self.model_var_type in [ModelVarType.LEARNED, ModelVarType.LEARNED_RANGE]:
            assert model_output.shape == (B, C * 2, *x.shape[2:])
            model_output, model_var_values = th.split(model_output, C, dim=1)
            assert self.model_var_type == ModelVarType.LEARNED_RANGE
            min_log = self._x(self.posterior_log_variance_clipped, t, x.shape)
            max_log = self._x(np.log(self.betas), t, x.shape)
            frac = (model_var_values + 1) / 2
            model_log_variance = frac * max_log + (1 - frac) * min_log
            model_variance = th.exp(model_log_variance)
        else:
            raise NotImplementedError("only LEARNED_RANGE reaches p_mean_variance in training_losses")

        def process_xstart(x):
            if denoised_fn is not None:
                x = denoised_fn(x)
            if clip_denoised:
                return x.clamp(-1, 1)
            return x

        assert self.model_mean_type == ModelMeanType.EPSILON
        pred_xstart = process_xstart(self._predict_xstart_from_eps(x_t=x, t=t, eps=model_output))
        model_mean, _, _ = self.q_posterior_mean_variance(x_start=pred_xstart, x_t=x, t=t)
        assert model_mean.shape == model_log_variance.shape == pred_xstart.shape == x.shape
        return {"mean": model_mean, "variance": model_variance, "log_variance": model_log_variance,
                "pred_xstart": pred_xstart, "extra": extra}

    def _predict_xstart_from_eps(self, x_t, t, eps):
        assert x_t.shape == eps.shape
        return (
            self._x(self.sqrt_recip_alphas_cumprod, t, x_t.shape) * x_t
            - self._x(self.sqrt_recipm1_alphas_cumprod, t, x_t.shape) * eps
        )

    def _vb_terms_bpd(self, model, x_start, x_t, t, clip_denoised=True, model_kwargs=None):
        true_mean, _, true_log_variance_clipped = self.q_posterior_mean_variance(x_start=x_start, x_t=x_t, t=t)
        out = self.p_mean_variance(model, x_t, t, clip_denoised=clip_denoised, model_kwargs=model_kwargs)
        kl = normal_kl(true_mean, true_log_variance_clipped, out["mean"], out["log_variance"])
        kl = mean_flat(kl) / np.log(2.0)
        decoder_nll = -discretized_gaussian_log_likelihood(
            x_start, means=out["mean"], log_scales=0.5 * out["log_variance"]
        )
        assert decoder_nll.shape == x_start.shape
        decoder_nll = mean_flat(decoder_nll) / np.log(2.0)
        output = th.where((t == 0), decoder_nll, kl)
        return {"output": output, "pred_xstart": out["pred_xstart"]}

    def training_losses(self, model, x_start, t, model_kwargs=None, noise=None):
        if model_kwargs is None:
            model_kwargs = {}
        x_t = self.q_sample(x_start, t, noise=noise)
        terms = {}
        assert self.loss_type == LossType.MSE
        model_output = model(x_t, t, **model_kwargs)
        terms["output"] = model_output  # (kept for the comparison; not in the official dict)
        if self.model_var_type in [ModelVarType.LEARNED, ModelVarType.LEARNED_RANGE]:
            B, C = x_t.shape[:2]
            assert model_output.shape == (B, C * 2, *x_t.shape[2:])
            model_output, model_var_values = th.split(model_output, C, dim=1)
            frozen_out = th.cat([model_output.detach(), model_var_values], dim=1)
            terms["vb"] = self._vb_terms_bpd(
                model=lambda *args, r=frozen_out: r,
                x_start=x_start,
                x_t=x_t,
                t=t,
                clip_denoised=False,
            )["output"]
        target = {ModelMeanType.EPSILON: noise}[self.model_mean_type]
        assert model_output.shape == target.shape == x_start.shape
        terms["mse"] = mean_flat((target - model_output) ** 2)
        if "vb" in terms:
            terms["loss"] = terms["mse"] + terms["vb"]
        else:
            terms["loss"] = terms["mse"]
        return terms


# ------------------------------------------------------------------------------------------------
# Our names and layouts <-> the official ones.
# ------------------------------------------------------------------------------------------------

def official_names(o):
    """[(our name, official name, ours -> official, official -> ours)] for every parameter."""
    same = (lambda w: w, lambda w: w)
    D, H = o.d_model, o.n_head
    hd = D // H
    # ours: rows [h][q|k|v][hd]; timm: rows [q|k|v][h][hd]
    qkv_w = (lambda w: w.reshape(H, 3, hd, D).transpose(0, 1).reshape(3 * D, D),
             lambda w: w.reshape(3, H, hd, D).transpose(0, 1).reshape(3 * D, D))
    qkv_b = (lambda b: b.reshape(H, 3, hd).transpose(0, 1).reshape(3 * D),
             lambda b: b.reshape(3, H, hd).transpose(0, 1).reshape(3 * D))
    p, C = o.patch_size, o.in_channels
    conv = (lambda w: w.reshape(D, C, p, p), lambda w: w.reshape(D, C * p * p))
    rows = [("x_embedder.weight", "x_embedder.proj.weight", *conv),
            ("x_embedder.bias", "x_embedder.proj.bias", *same),
            ("t_embedder.fc1.weight", "t_embedder.mlp.0.weight", *same),
            ("t_embedder.fc1.bias", "t_embedder.mlp.0.bias", *same),
            ("t_embedder.fc2.weight", "t_embedder.mlp.2.weight", *same),
            ("t_embedder.fc2.bias", "t_embedder.mlp.2.bias", *same),
            ("y_embedder.weight", "y_embedder.embedding_table.weight", *same)]
    for i in range(o.n_layer):
        b = f"blocks.{i}."
        rows += [(b + "adaLN.weight", b + "adaLN_modulation.1.weight", *same),
                 (b + "adaLN.bias", b + "adaLN_modulation.1.bias", *same),
                 (b + "attn.qkv.weight", b + "attn.qkv.weight", *qkv_w),
                 (b + "attn.qkv.bias", b + "attn.qkv.bias", *qkv_b),
                 (b + "attn.proj.weight", b + "attn.proj.weight", *same),
                 (b + "attn.proj.bias", b + "attn.proj.bias", *same),
                 (b + "mlp.fc.weight", b + "mlp.fc1.weight", *same),
                 (b + "mlp.fc.bias", b + "mlp.fc1.bias", *same),
                 (b + "mlp.proj.weight", b + "mlp.fc2.weight", *same),
                 (b + "mlp.proj.bias", b + "mlp.fc2.bias", *same)]
    for k in ("weight", "bias"):
        rows += [(f"final_layer.adaLN.{k}", f"final_layer.adaLN_modulation.1.{k}", *same),
                 (f"final_layer.linear.{k}", f"final_layer.linear.{k}", *same)]
    return rows


def official_run(meta, tensors, dtype):
    """The official model and loss on IN's tensors -> (out, loss, mse, vb, {our name: grad})."""
    o = dit_reference.Options(meta)
    model = DiT(input_size=o.image_size, patch_size=o.patch_size, in_channels=o.in_channels, hidden_size=o.d_model,
                depth=o.n_layer, num_heads=o.n_head, mlp_ratio=o.mlp_ratio, class_dropout_prob=o.class_dropout,
                num_classes=o.num_classes, learn_sigma=o.learn_sigma).to(dtype)
    model.eval()  # no label dropout: the labels come already dropped
    params = dict(model.named_parameters())
    rows = official_names(o)
    assert {r[1] for r in rows} == {n for n, p in params.items() if p.requires_grad}, "conversion misses names"
    with torch.no_grad():
        for ours, theirs, to_official, _ in rows:
            params[theirs].copy_(to_official(tensors[ours].to(dtype)))
    x0, noise, t, y = (tensors[k] for k in ("x0", "noise", "t", "labels"))
    x0, noise = x0.to(dtype), noise.to(dtype)
    if o.diffusion == "ddpm":
        betas = get_beta_schedule("linear", beta_start=o.beta_start, beta_end=o.beta_end,
                                  num_diffusion_timesteps=o.num_timesteps)
        diffusion = GaussianDiffusion(betas=betas, model_mean_type=ModelMeanType.EPSILON,
                                      model_var_type=(ModelVarType.LEARNED_RANGE if o.learn_sigma
                                                      else ModelVarType.FIXED_LARGE),
                                      loss_type=LossType.MSE, dtype=dtype)
        terms = diffusion.training_losses(model, x0, t, dict(y=y), noise=noise)
        loss = terms["loss"].mean()  # train.py
        out, mse, vb = terms["output"], terms["mse"].mean(), terms.get("vb", torch.zeros(1, dtype=dtype)).mean()
    else:  # rectified flow, written out
        s = t.to(dtype).view(-1, 1, 1, 1)
        x_t = (1 - s) * x0 + s * noise
        out = model(x_t, t.to(dtype) * 1000, y)
        loss = mse = mean_flat((out - (noise - x0)) ** 2).mean()
        vb = torch.zeros((), dtype=dtype)
    loss.backward()
    grads = {ours: to_ours(params[theirs].grad) for ours, theirs, _, to_ours in rows}
    return out, loss, mse, vb, grads


# ------------------------------------------------------------------------------------------------
# Cases.
# ------------------------------------------------------------------------------------------------

def make_case(seed, meta, t, labels, batch=None):
    """Random non-zero f32 weights under our names (fan-in scaled), x0, noise, t, labels -> IN tensors."""
    g = torch.Generator().manual_seed(seed)
    o = dit_reference.Options(meta)
    model = dit_reference.build(meta, torch.float32)
    tensors = {}
    for name, p in model.named_parameters():
        if name == "y_embedder.weight":
            w = torch.randn(p.shape, generator=g)
        elif p.dim() == 2:
            w = torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1])
        else:
            w = 0.3 * torch.randn(p.shape, generator=g)
        tensors[name] = w.float()
    B = len(labels)
    shape = (B, o.in_channels, o.image_size, o.image_size)
    tensors["x0"] = (2.4 * torch.rand(shape, generator=g) - 1.2).float()  # some beyond +-0.999
    tensors["noise"] = torch.randn(shape, generator=g).float()
    tensors["t"] = torch.tensor(t, dtype=torch.int64 if o.diffusion == "ddpm" else torch.float32)
    tensors["labels"] = torch.tensor(labels, dtype=torch.int64)
    return tensors


BASE = dict(in_channels=3, image_size=8, patch_size=2, d_model=32, n_layer=2, n_head=4, mlp_ratio=4.0,
            num_classes=5, class_dropout=0.1, learn_sigma="true", diffusion="ddpm", num_timesteps=1000,
            beta_start=1e-4, beta_end=0.02)


def meta_of(**kw):
    m = dict(BASE)
    m.update(kw)
    return {k: str(v) for k, v in m.items()}


CASES = [
    ("ddpm learn_sigma, t 0 1 517 999, null class", meta_of(), [0, 1, 517, 999], [5, 0, 3, 4]),
    ("ddpm learn_sigma, p 4, D 24 (3 heads), mlp_ratio 2.7, 3 layers, no dropout row, t 0 0 3 250",
     meta_of(in_channels=4, patch_size=4, d_model=24, n_head=3, mlp_ratio=2.7, n_layer=3, num_classes=7,
             class_dropout=0.0), [0, 0, 3, 250], [6, 0, 2, 2]),
    ("ddpm without learn_sigma, t 0 999 42", meta_of(learn_sigma="false"), [0, 999, 42], [1, 5, 2]),
    ("ddpm learn_sigma, 50 steps, betas 1e-3 .. 0.05, t 0 1 49", meta_of(num_timesteps=50, beta_start=1e-3,
                                                                         beta_end=0.05), [0, 1, 49], [0, 1, 5]),
    ("flow, t 0 1 0.25 0.7", meta_of(learn_sigma="false", diffusion="flow"), [0.0, 1.0, 0.25, 0.7], [5, 1, 2, 3]),
    ("flow, C 2, p 4, no dropout row", meta_of(learn_sigma="false", diffusion="flow", in_channels=2, patch_size=4,
                                               class_dropout=0.0), [0.5, 0.001], [4, 0]),
]


def write_in(path, tensors, meta):
    """gpt_reference's writer packs tensors back to back in the given order: widest elements first
    keeps every tensor aligned for its dtype (as our C++ writer does), which the shared reader needs."""
    order = sorted(tensors, key=lambda k: -tensors[k].element_size())
    write_safetensors(path, {k: tensors[k] for k in order}, meta)


def max_err(a, b):
    a, b = a.to(torch.float64), b.to(torch.float64)
    return (a - b).abs().max().item() if a.numel() else 0.0, max(1.0, b.abs().max().item() if b.numel() else 0.0)


def compare_pos_embed():
    print("position embedding: ours (torch) vs official get_2d_sincos_pos_embed (numpy)")
    for D, grid in ((32, 4), (24, 2), (1152, 16), (384, 32)):
        ours = dit_reference.pos_embed_2d(D, grid)
        official = torch.from_numpy(get_2d_sincos_pos_embed(D, grid))
        e, _ = max_err(ours, official)
        check(ours.shape == official.shape and e < 1e-12, f"D {D}, grid {grid}: max |diff| {e:.1e}")
    # The column / row assignment, spelled out: token (row 1, col 0) vs (row 0, col 1).
    pe = dit_reference.pos_embed_2d(8, 3)
    check(torch.equal(pe[1, :4], pe[4, 4:]) and torch.equal(pe[3, 4:], pe[1, :4]) and pe[1, 0].item() != 0,
          "first half encodes the column, second half the row")


def compare_schedule():
    o = dit_reference.Options(meta_of())
    ours = dit_reference.DdpmSchedule(o)
    named = get_named_beta_schedule("linear", 1000)
    check(np.array_equal(ours.betas, named),
          "1000 steps, beta 1e-4 .. 0.02 equals get_named_beta_schedule('linear', 1000)")


def compare_cases(tmp):
    print("dit_reference.py (one process, several IN OUT pairs) vs the official layout, float64:")
    ins, outs, args = [], [], []
    for i, (label, meta, t, labels) in enumerate(CASES):
        tensors = make_case(100 + i, meta, t, labels)
        path_in, path_out = os.path.join(tmp, f"in{i}.safetensors"), os.path.join(tmp, f"out{i}.safetensors")
        write_in(path_in, tensors, meta)
        ins.append(path_in)
        outs.append(path_out)
        args += [path_in, path_out]
    script = os.path.join(HERE, "dit_reference.py")
    r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    print("  " + r.stdout.strip().replace("\n", "\n  "))
    check(r.returncode == 0, f"dit_reference.py exit status {r.returncode} {r.stderr.strip()}")
    if r.returncode:
        return

    for i, (label, meta, t, labels) in enumerate(CASES):
        _, tensors, meta_in = read_safetensors(ins[i])
        _, ref, meta_out = read_safetensors(outs[i])
        out, loss, mse, vb, grads = official_run(meta_in, tensors, torch.float64)
        o = dit_reference.Options(meta_in)
        expected_names = {"out", "loss"} | {"grad." + n for n in grads}
        ok_names = set(ref) == expected_names and all(v.dtype == torch.float64 for v in ref.values())
        worst, worst_name = 0.0, ""
        for name, official in [("out", out), ("loss", loss)] + [("grad." + n, g) for n, g in grads.items()]:
            if name not in ref or ref[name].shape != official.shape:
                ok_names = False
                continue
            e, scale = max_err(ref[name], official)
            if e / scale > worst:
                worst, worst_name = e / scale, name
        e_mse, _ = max_err(torch.tensor(float(meta_out["mse"]), dtype=torch.float64), mse.detach())
        e_vb, _ = max_err(torch.tensor(float(meta_out["vb"]), dtype=torch.float64), vb.detach())
        nonzero = sum(1 for g in grads.values() if g.abs().max() > 0)
        check(ok_names, f"{label}: OUT holds out {list(out.shape)}, loss and {len(grads)} f64 gradients")
        check(worst <= TOLERANCE and max(e_mse, e_vb) <= TOLERANCE * max(1, abs(loss.item())),
              f"{label}: loss {loss.item():.10g} (mse {mse.item():.6g}, vb {vb.item():.6g}), worst relative "
              f"error {worst:.1e} ({worst_name}), mse/vb {max(e_mse, e_vb):.1e}")
        check(nonzero == len(grads) and out.shape[1] == o.out_channels,
              f"{label}: {nonzero}/{len(grads)} gradients non-zero, C_out {out.shape[1]}")

    print("--dtype float32 against float64 (case 1):")
    out32 = os.path.join(tmp, "out0_f32.safetensors")
    r = subprocess.run([sys.executable, script, ins[0], out32, "--dtype", "float32"], capture_output=True, text=True)
    check(r.returncode == 0, f"--dtype float32 exit status {r.returncode} {r.stderr.strip()}")
    if r.returncode == 0:
        _, a, _ = read_safetensors(out32)
        _, b, _ = read_safetensors(outs[0])
        worst = max(max_err(a[k], b[k])[0] / max_err(a[k], b[k])[1] for k in b)
        check(all(v.dtype == torch.float32 for v in a.values()) and worst < 1e-3,
              f"f32 tensors, worst relative difference to f64 {worst:.1e}")

    print("refusals:")
    bad = make_case(7, meta_of(learn_sigma="false", diffusion="flow"), [0.5], [0])
    path = os.path.join(tmp, "bad.safetensors")
    write_in(path, bad, meta_of(learn_sigma="true", diffusion="flow"))
    r = subprocess.run([sys.executable, script, path, path + ".out"], capture_output=True, text=True)
    check(r.returncode != 0 and "learn_sigma" in r.stderr, f"flow with learn_sigma: exit {r.returncode}, "
          f"{r.stderr.strip()}")


def gradchecks():
    print("torch.autograd.gradcheck, float64, tiny model (image 4, p 2, C 2, D 8, 2 heads, 1 layer):")
    from torch.nn.utils.stateless import functional_call
    # At t = 0 the bound is the discretized decoder NLL, log(cdf_plus - cdf_min) of two nearly equal
    # tanh-CDF values: the official formula's cancellation leaves ~1e-11 of rounding noise in the
    # loss, which a central difference with step 1e-6 turns into ~1e-5 of gradient error. So that
    # batch (all t = 0) uses step 1e-4 and looser tolerances (the error measured: ~1e-7 of ~0.2).
    for diffusion, learn_sigma, t, step, atol, rtol in (
            ("ddpm", "true", [5, 300, 999], 1e-6, 1e-7, 1e-5),
            ("ddpm", "true", [0, 0, 0], 1e-4, 1e-6, 1e-4),
            ("ddpm", "false", [0, 300, 999], 1e-6, 1e-7, 1e-5),
            ("flow", "false", [0.0, 0.3, 1.0], 1e-6, 1e-7, 1e-5)):
        meta = meta_of(in_channels=2, image_size=4, patch_size=2, d_model=8, n_head=2, n_layer=1, num_classes=3,
                       learn_sigma=learn_sigma, diffusion=diffusion)
        tensors = make_case(11, meta, t, [0, 3, 1])
        model = dit_reference.build(meta, torch.float64)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(tensors[name].double())
        x0, noise, tt, y = tensors["x0"].double(), tensors["noise"].double(), tensors["t"], tensors["labels"]
        x0 = x0.clamp(-0.9, 0.9)  # away from the +-0.999 edges of the discretized likelihood
        x_t, model_t = model.noised(x0, noise, tt)
        C = model.o.in_channels
        with torch.no_grad():
            eps_frozen = model(x_t, model_t, y)[:, :C]

        def loss_of(name):
            def f(w):
                out = functional_call(model, {name: w}, (x_t, model_t, y))
                if diffusion == "flow":
                    return ((out[:, :C] - (noise - x0)) ** 2).mean()
                mse = ((noise - out[:, :C]) ** 2).mean(dim=(1, 2, 3))
                # The bound sees eps as a constant (detached in the loss): hold it fixed here too.
                vb = model.vb_terms(x0, x_t, tt, eps_frozen, out[:, C:]) if learn_sigma == "true" else 0
                return (mse + vb).mean()
            return f

        def out_of(name):
            return lambda w: functional_call(model, {name: w}, (x_t, model_t, y))

        params = dict(model.named_parameters())
        for name in ("blocks.0.attn.qkv.weight", "blocks.0.adaLN.weight", "x_embedder.weight",
                     "t_embedder.fc1.bias", "final_layer.linear.weight", "y_embedder.weight"):
            w = params[name].detach().clone().requires_grad_(True)
            ok = torch.autograd.gradcheck(loss_of(name), (w,), eps=step, atol=atol, rtol=rtol, raise_exception=False)
            check(ok, f"{diffusion}{' learn_sigma' if learn_sigma == 'true' else ''}, t {t}: d loss / d {name} "
                      f"(step {step:g}, atol {atol:g}, rtol {rtol:g})")
        for name in ("blocks.0.attn.qkv.bias", "final_layer.adaLN.weight"):
            w = params[name].detach().clone().requires_grad_(True)
            ok = torch.autograd.gradcheck(out_of(name), (w,), eps=1e-6, atol=1e-7, rtol=1e-5, raise_exception=False)
            check(ok, f"{diffusion}{' learn_sigma' if learn_sigma == 'true' else ''}: d out / d {name}")

        # The loss's own backward (eps detached in the bound) equals the gradient checked above.
        model.zero_grad()
        _, loss, _ = model.loss(x0, noise, tt, y)
        loss.backward()
        w = params["final_layer.linear.weight"].detach().clone().requires_grad_(True)
        g, = torch.autograd.grad(loss_of("final_layer.linear.weight")(w), w)
        e, _ = max_err(params["final_layer.linear.weight"].grad, g)
        check(e < 1e-14, f"{diffusion}: model.loss backward equals the checked function's gradient ({e:.1e})")


def main():
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    print(f"torch {torch.__version__}, numpy {np.__version__}")
    compare_pos_embed()
    compare_schedule()
    with tempfile.TemporaryDirectory(prefix="dit_reference_selftest_") as tmp:
        compare_cases(tmp)
    gradchecks()
    if failures:
        print(f"dit_reference_selftest.py: {len(failures)} FAILED")
        return 1
    print("dit_reference_selftest.py: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
