#!/usr/bin/env bash
# A tiny class-conditional DiT learns Fashion-MNIST: configs/dit-fashion.yaml shrunk to 16x16
# images (4x4 patches: 16 tokens), 2 blocks of width 64, trained 300 steps of DDPM (ε-prediction,
# whatever process the preset uses) on 2 ranks of WallFacer sequence parallelism (sp 2), must reach
# a validation loss (ε-MSE on the test split) below 0.15; then `wallfacer sample` must write a PNG
# grid of the right size from its checkpoint with the EMA weights.
#
# Why that threshold: a fresh DiT predicts 0 (zero-initialised final layer), loss exactly 1.0;
# predicting ε = x_t scores 0.30; and the best predictor that knows each pixel's mean and
# variance but nothing of how pixels relate (the per-pixel Gaussian posterior mean of ε) scores
# 0.171 on these 16x16 images, averaged over the 1000 timesteps (computed from the data with
# PyTorch, docs/models-dit.md). Beating 0.15 takes image structure, which comes through
# attention across the sequence-parallel ranks. Measured here: 0.127 after 300 steps (seconds).
#
#   tests/train/dit_learning_test.sh WALLFACER_EXE MPIEXEC [MPIEXEC_FLAGS...]
set -euo pipefail
exe="$1"; mpiexec="$2"; shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
data="${WF_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
if [ ! -f "$data/train-images-idx3-ubyte.gz" ] || [ ! -f "$data/t10k-labels-idx1-ubyte.gz" ]; then
  # 77: CTest's SKIP_RETURN_CODE for this test, so missing data shows as SKIPPED, not passed.
  echo "SKIPPED: no Fashion-MNIST in $data (apt-get install dataset-fashion-mnist)"; exit 77
fi

args=("$root/configs/dit-fashion.yaml"
  --set parallel.sp=2 --set parallel.C=1 --set model.diffusion=ddpm --set model.image_size=16 --set model.d_model=64 --set model.n_layer=2
  --set model.n_head=4 --set train.seq_len=16 --set train.steps=300 --set train.lr=1e-3 --set train.warmup_steps=20
  --set train.eval_every=100 --set train.eval_batches=8 --set train.log_every=50 --set train.ema_decay=0.99
  --set data.train_path="$data/train-images-idx3-ubyte.gz" --set data.train_labels_path="$data/train-labels-idx1-ubyte.gz"
  --set data.val_path="$data/t10k-images-idx3-ubyte.gz" --set data.val_labels_path="$data/t10k-labels-idx1-ubyte.gz"
  --set checkpoint.dir="$work/checkpoints" --set log.dir="$work/logs")
"$mpiexec" -np 2 "$@" "$exe" train "${args[@]}"

val=$(python3 -c 'import json,sys; print([j["val_loss"] for j in map(json.loads, open(sys.argv[1])) if "val_loss" in j][-1])' \
  "$work/logs/metrics.jsonl")
echo "final validation loss $val (threshold 0.15; per-pixel baseline 0.171, fresh model 1.0)"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < 0.15 else 1)' "$val" || {
  echo "FAIL: the DiT did not learn image structure (validation loss $val >= 0.15)"; exit 1; }

# 16 samples of class 7 (sneakers), EMA weights: a 4 x 4 grid of 16x16 images, 2-pixel padding.
"$exe" sample "${args[@]}" --checkpoint "$work/checkpoints" --class 7 --n 16 --steps 25 --out "$work/grid.png" \
  2>&1 | tee "$work/sample.log"
grep -q "EMA weights" "$work/sample.log" || { echo "FAIL: sample did not use the checkpoint's EMA weights"; exit 1; }
read -r width height < <(python3 -c 'import struct,sys; d=open(sys.argv[1],"rb").read(32); assert d[:8]==b"\x89PNG\r\n\x1a\n"; print(*struct.unpack(">II", d[16:24]))' "$work/grid.png")
[ "$width" = 74 ] && [ "$height" = 74 ] || { echo "FAIL: the grid is ${width}x${height}, expected 74x74"; exit 1; }
echo "dit learning: PASS (val $val, grid ${width}x${height})"
