#!/usr/bin/env bash
# `wallfacer sample` warns, suggesting --no-ema, when a checkpoint's EMA weights are still mostly
# the initial ones. A tiny DiT (synthetic images, one process) trained 2 steps at ema_decay 0.995
# without the warm-up keeps 0.995^2 = 99% of them: a warning. The same 2 steps with the warm-up
# (train.ema_warmup, the default) keep 0.1 x 2/11 = 1.8%: none; nor with --no-ema.
#
#   tests/cli/sample_ema_warning_test.sh WALLFACER_EXE SOURCE_DIR
set -euo pipefail
exe="$1" src="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

tiny=("$src/configs/dit-fashion.yaml" --set data.source=synthetic --set parallel.sp=1 --set parallel.C=1
  --set model.image_size=8 --set model.patch_size=4 --set model.d_model=16 --set model.n_layer=1
  --set model.n_head=2
  --set train.seq_len=4 --set train.micro_batch_size=2 --set train.global_batch_size=2 --set train.steps=2
  --set train.warmup_steps=1 --set train.eval_every=0 --set train.log_every=1 --set checkpoint.every=0)
for warmup in false true; do
  "$exe" train "${tiny[@]}" --set train.ema_warmup=$warmup --set checkpoint.dir="$dir/ckpt-$warmup" \
    --set log.dir="$dir/log-$warmup" >"$dir/train-$warmup.txt" 2>&1 || { cat "$dir/train-$warmup.txt"; fail "train"; }
  "$exe" sample "${tiny[@]}" --checkpoint "$dir/ckpt-$warmup" --n 2 --steps 2 --out "$dir/$warmup.png" \
    >"$dir/sample-$warmup.txt" 2>&1 || { cat "$dir/sample-$warmup.txt"; fail "sample"; }
  cat "$dir/sample-$warmup.txt"
done
grep -q "the EMA weights are barely trained: after 2 steps at train.ema_decay 0.995 (without warm-up" \
  "$dir/sample-false.txt" || fail "no warning for an EMA that is 99% its initial weights"
grep -q "still 99% the initial weights.*--no-ema" "$dir/sample-false.txt" || fail "the warning does not suggest --no-ema"
grep -q "barely trained" "$dir/sample-true.txt" && fail "a warning for a warmed-up EMA (1.8% initial weights)"
"$exe" sample "${tiny[@]}" --checkpoint "$dir/ckpt-false" --n 2 --steps 2 --out "$dir/no-ema.png" --no-ema \
  >"$dir/sample-no-ema.txt" 2>&1 || { cat "$dir/sample-no-ema.txt"; fail "sample --no-ema"; }
grep -q "trained weights" "$dir/sample-no-ema.txt" || fail "--no-ema did not sample the trained weights"
grep -q "barely trained" "$dir/sample-no-ema.txt" && fail "a warning with --no-ema"
echo "PASS"
