#!/usr/bin/env bash
# `wallfacer train --no-resume` never mixes a new run with checkpoints already in checkpoint.dir:
# a first run (--no-resume into an empty directory) trains and checkpoints; a second
# --no-resume into the same directory is refused before any step, every rank alike, the message
# printed once (the directory, how many checkpoints, the newest step, the fixes), and leaves every
# checkpoint file as it was; without --no-resume the same command continues from the newest.
# An unwritable checkpoint.dir (checked on rank 0 too) ends every rank with rank 0's message.
#
#   tests/train/fresh_start_test.sh WALLFACER_EXE MPIEXEC [MPIEXEC_FLAGS...]
set -euo pipefail
exe="$1"; mpiexec="$2"; shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
flags=("$@")
ckpt="$work/checkpoints"

# 2 ranks as sp 2, a small model on synthetic tokens, a checkpoint every 2 steps, the newest 2 kept.
train() {
  timeout 300 "$mpiexec" -np 2 "${flags[@]}" "$exe" train "$root/configs/gpt-tiny.yaml" \
    --set parallel.dp=1 --set parallel.sp=2 \
    --set model.n_layer=2 --set model.d_model=32 --set model.d_ff=64 --set model.max_seq_len=64 \
    --set train.seq_len=64 --set train.micro_batch_size=2 --set train.global_batch_size=4 \
    --set train.warmup_steps=1 --set train.log_every=1 --set train.eval_every=0 --set data.source=synthetic \
    --set checkpoint.dir="$ckpt" --set checkpoint.every=2 --set checkpoint.keep_last=2 --set log.dir="$work" "$@"
}
fingerprint() { (cd "$ckpt" && find . -type f | sort | xargs sha256sum); }
# refused LOG EXPECTED TRAIN_ARGS...: the run fails with status 1 (and does not hang), and the
# job prints EXPECTED once: rank 0's line saying both ranks agree, and no other error line.
refused() {
  local log="$1" expected="$2" rc=0; shift 2
  train "$@" > "$log" 2>&1 || rc=$?
  [ "$rc" -eq 1 ] || { cat "$log"; echo "FAIL: exit status $rc (0: not refused, 124: hung)"; exit 1; }
  local errors
  errors="$(grep '^wallfacer: error: ' "$log" || true)"
  [ "$errors" = "wallfacer: error: $expected (all 2 ranks agree)" ] ||
    { cat "$log"; echo "FAIL: not one line saying: $expected (all 2 ranks agree)"; exit 1; }
  if grep -q "MPI_ABORT" "$log"; then cat "$log"; echo "FAIL: MPI_Abort's banner"; exit 1; fi
  echo "the job gave the message once"
}

echo "== --no-resume into an empty checkpoint.dir trains (6 steps)"
train --set train.steps=6 --no-resume > "$work/first.log" 2>&1 || { cat "$work/first.log"; echo "FAIL: first run"; exit 1; }
test -f "$ckpt/step-00000006/manifest.json" && test -f "$ckpt/step-00000004/manifest.json"
before="$(fingerprint)"

echo "== --no-resume into the same directory is refused on every rank"
expected="checkpoint.dir = '$ckpt' already holds 2 checkpoints (the newest at step 6, $ckpt/step-00000006), and --no-resume starts a new run at step 0 whose checkpoints would mix with them (pruning to keep_last would keep the newer, stale steps, and a later resume would continue from them); point checkpoint.dir at another directory (--set checkpoint.dir=...), delete them (rm -r '$ckpt'/step-*), or drop --no-resume to continue from step 6"
refused "$work/second.log" "$expected" --set train.steps=4 --no-resume
if grep -q "step 1/" "$work/second.log"; then echo "FAIL: the refused run trained"; exit 1; fi
[ "$(fingerprint)" = "$before" ] || { echo "FAIL: the refused run changed the checkpoints"; exit 1; }

echo "== without --no-resume the same directory continues from step 6"
train --set train.steps=8 > "$work/third.log" 2>&1 || { cat "$work/third.log"; echo "FAIL: resumed run"; exit 1; }
grep -q "resumed from the step-6 checkpoint" "$work/third.log" || { cat "$work/third.log"; echo "FAIL: did not resume from step 6"; exit 1; }
test -f "$ckpt/step-00000008/manifest.json" && test ! -e "$ckpt/step-00000004"

echo "== an unwritable checkpoint.dir (under a regular file) ends every rank with rank 0's message"
touch "$work/a-file"
ckpt="$work/a-file/checkpoints"
expected="checkpoint.dir = '$ckpt': cannot create the directory: Not a directory; set checkpoint.dir to a directory this job can write"
refused "$work/fourth.log" "$expected" --set train.steps=2
echo "PASS"
