#!/usr/bin/env bash
# Distributed checkpoints survive a kill at any moment of a save: `wallfacer train` under mpirun
# (tp 2, both ranks writing pieces) with a checkpoint every step is killed inside the step-3 save
# at each point of the protocol (the test-only hook WF_TEST_CRASH_IN_SAVE makes rank 0 SIGKILL
# itself there, distributed_checkpoint.h): before the rename the step-2 checkpoint is the newest
# and resumes, after it step 3 does, and training continues to the end. A checkpoint missing one
# rank file is refused naming the file, one with a corrupted file is skipped with a warning
# naming it; both times the previous checkpoint is used. `wallfacer checkpoint info` and
# `export` then read the result; bad input is refused with the problem named.
#
#   tests/train/kill_during_save_test.sh WALLFACER_EXE MPIEXEC [MPIEXEC_FLAGS...]
set -euo pipefail
exe="$1"; mpiexec="$2"; shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
flags=("$@")

train() {  # train DIR [ARGS...]
  local dir="$1"; shift
  timeout 300 "$mpiexec" -np 2 "${flags[@]}" "$exe" train "$root/configs/gpt-tiny.yaml" \
    --set parallel.dp=1 --set parallel.sp=1 --set parallel.tp=2 \
    --set model.n_layer=1 --set model.d_model=32 --set model.d_ff=64 --set model.max_seq_len=32 \
    --set train.seq_len=32 --set train.micro_batch_size=1 --set train.global_batch_size=2 --set train.steps=4 \
    --set train.warmup_steps=1 --set train.log_every=1 --set train.eval_every=0 --set data.source=synthetic \
    --set checkpoint.dir="$dir/checkpoints" --set checkpoint.every=1 --set checkpoint.keep_last=3 --set log.dir="$dir" "$@"
}
fail() { echo "FAIL: $1"; [ -n "${2:-}" ] && echo "$2"; exit 1; }
expect() {  # expect OUTPUT TEXT...: every TEXT is in OUTPUT
  local out="$1"; shift
  for part in "$@"; do grep -qF -- "$part" <<<"$out" || fail "no '$part' in the output" "$out"; done
}

echo "== two steps, a checkpoint after each"
train "$work/base" --stop-after 2 > /dev/null 2>&1
test -f "$work/base/checkpoints/step-00000002/manifest.json" || fail "no step-2 checkpoint"

for point in after_rank_files after_manifest after_rename; do
  echo "== killed inside the step-3 save: $point"
  rm -rf "$work/$point" && cp -r "$work/base" "$work/$point"
  if WF_TEST_CRASH_IN_SAVE="$point" train "$work/$point" > "$work/$point.log" 2>&1; then
    fail "the run with WF_TEST_CRASH_IN_SAVE=$point was not killed" "$(cat "$work/$point.log")"
  fi
  newest=2
  if [ "$point" = after_rename ]; then newest=3; fi
  test ! -e "$work/$point/checkpoints/step-0000000$((newest + 1))" || fail "a later step is visible after $point"
  out="$(train "$work/$point" 2>&1)" || fail "the resumed run failed" "$out"
  expect "$out" "resumed from the step-$newest checkpoint" "step 4/4"
  if grep -q "skipping checkpoint" <<<"$out"; then fail "a checkpoint was skipped after $point" "$out"; fi
  for step in 3 4; do
    test -f "$work/$point/checkpoints/step-0000000$step/manifest.json" || fail "no step-$step checkpoint after $point"
  done
  if [ -n "$(find "$work/$point/checkpoints" -maxdepth 1 -name '.tmp-*')" ]; then fail "leftovers of the killed save remain"; fi
done

echo "== a checkpoint missing a rank file is refused naming the file; the previous one is used"
rm -rf "$work/missing" && cp -r "$work/base" "$work/missing"
rm "$work/missing/checkpoints/step-00000002/rank-00001.safetensors"
out="$(train "$work/missing" --set train.steps=3 2>&1)" || fail "the run failed" "$out"
expect "$out" "skipping checkpoint '$work/missing/checkpoints/step-00000002'" \
  "checkpoint file '$work/missing/checkpoints/step-00000002/rank-00001.safetensors' is missing" \
  "resumed from the step-1 checkpoint"

echo "== a corrupted rank file: a warning naming it, the previous checkpoint used"
rm -rf "$work/corrupt" && cp -r "$work/base" "$work/corrupt"
# (rank 0's file: every rank reads it, so rank 0, which logs, warns too)
file="$work/corrupt/checkpoints/step-00000002/rank-00000.safetensors"
size=$(stat -c %s "$file")
printf '\x55' | dd of="$file" bs=1 seek=$((size - 5)) conv=notrunc status=none
out="$(train "$work/corrupt" --set train.steps=3 2>&1)" || fail "the run failed" "$out"
expect "$out" "checkpoint file '$file' fails its checksum" "resumed from the step-1 checkpoint"

echo "== checkpoint info and export"
out="$("$exe" checkpoint info "$work/after_rename/checkpoints")"
expect "$out" "format version 4, step 4" "dp 1 x tp 2 x sp 1" "world size 2" "all SHA-256 checksums verified" \
  "token_embedding.weight" "2 pieces"
# Into WF_EXPORT_DIR when set: tests/reference/read_export.py reads them with PyTorch (CTest's
# train_export_pytorch).
exports="${WF_EXPORT_DIR:-$work}"
mkdir -p "$exports"
"$exe" checkpoint export "$work/after_rename/checkpoints/step-00000004" "$exports/model.safetensors" > /dev/null
"$exe" checkpoint export --optimizer "$work/after_rename/checkpoints/step-00000004" "$exports/all.safetensors" > /dev/null
test "$(stat -c %s "$exports/all.safetensors")" -gt "$(stat -c %s "$exports/model.safetensors")" ||
  fail "--optimizer added nothing"
cp -r "$work/base/checkpoints/step-00000002" "$work/step-00000002"
printf '\x55' | dd of="$work/step-00000002/rank-00001.safetensors" bs=1 seek=100 conv=notrunc status=none
if out="$("$exe" checkpoint info "$work/step-00000002" 2>&1)"; then fail "info accepted a corrupt file"; fi
expect "$out" "fails its checksum"
if out="$("$exe" checkpoint export "$work/no-such" "$work/x.safetensors" 2>&1)"; then fail "export of nothing"; fi
expect "$out" "no such directory"
echo "PASS"
