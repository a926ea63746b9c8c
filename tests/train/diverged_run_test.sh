#!/usr/bin/env bash
# A run that diverges (docs/training.md, "A diverged run"): a learning rate past f32's range makes
# the first update's weights non-finite, and every later gradient norm with them.
#  - a good run checkpoints step 2;
#  - resumed with that learning rate and a checkpoint every step, the save of step 3 is refused
#    (non-finite weights are never saved): exit 1 with the message, the step-2 checkpoint untouched;
#  - with checkpoints only at the end, train.max_skipped_steps = 3 skipped steps in a row end the
#    run (exit 1, the message naming the key and the fixes) instead of skipping forever; under
#    mpirun every rank stops alike, the message printed once; the step-2 checkpoint is still the
#    only one.
#
#   tests/train/diverged_run_test.sh WALLFACER_EXE MPIEXEC [MPIEXEC_FLAGS...]
set -euo pipefail
exe="$1"; mpiexec="$2"; shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
flags=("$@")
ckpt="$work/checkpoints"
fail() { echo "FAIL: $*" >&2; cat "$work/out.txt" >&2 2>/dev/null || true; exit 1; }

# A small GPT on synthetic tokens: milliseconds a step.
args=("$root/configs/gpt-tiny.yaml" --set parallel.dp=1 --set parallel.sp=1 --set model.n_layer=1
      --set model.d_model=32 --set model.d_ff=64 --set model.max_seq_len=32 --set train.seq_len=32
      --set train.micro_batch_size=1 --set train.global_batch_size=1 --set train.warmup_steps=0
      --set train.log_every=1 --set train.eval_every=0 --set data.source=synthetic
      --set checkpoint.dir="$ckpt" --set log.dir="$work/logs")
diverging=(--set train.lr=1e300 --set train.steps=30 --set train.max_skipped_steps=3)
fingerprint() { (cd "$ckpt" && find . -type f | sort | xargs sha256sum); }
# refused EXPECTED COMMAND...: the command exits 1 (124: it hung) and its output holds EXPECTED.
refused() {
  local expected="$1" rc=0; shift
  timeout 120 "$@" > "$work/out.txt" 2>&1 || rc=$?
  [ "$rc" -eq 1 ] || fail "exit status $rc, expected 1 (0: the run went on, 124: it hung)"
  grep -qF -- "$expected" "$work/out.txt" || fail "no message saying: $expected"
}
only_step_2() {
  [ "$(ls "$ckpt")" = "step-00000002" ] || fail "checkpoint.dir holds $(ls "$ckpt" | tr '\n' ' '), not step-2 alone"
  [ "$(fingerprint)" = "$good" ] || fail "the step-2 checkpoint changed"
}

echo "== a good run checkpoints step 2"
timeout 120 "$exe" train "${args[@]}" --set train.steps=2 > "$work/out.txt" 2>&1 || fail "the good run failed"
good="$(fingerprint)"

echo "== non-finite weights are not saved: the save of step 3 is refused"
refused "checkpoint: the weights at step 3 are not all finite (NaN or infinity): not saved, so the checkpoints in \
$ckpt stay as they were; the run has diverged: lower train.lr" \
  "$exe" train "${args[@]}" "${diverging[@]}" --set checkpoint.every=1
only_step_2

echo "== train.max_skipped_steps skipped steps in a row end the run"
refused "step 6: the gradient norm has not been finite for 3 steps in a row (the last NaN), \
train.max_skipped_steps = 3: the run has diverged and would skip its updates forever; lower train.lr" \
  "$exe" train "${args[@]}" "${diverging[@]}" --set checkpoint.every=0
grep -q "step 4: the gradient norm is NaN; skipping the update" "$work/out.txt" || fail "no warning per skipped step"
only_step_2

echo "== under mpirun every rank stops alike, the message printed once"
refused "(all 2 ranks agree)" timeout 120 "$mpiexec" -np 2 "${flags[@]}" "$exe" train "${args[@]}" "${diverging[@]}" \
  --set checkpoint.every=0 --set parallel.dp=2 --set train.global_batch_size=2
[ "$(grep -c '^wallfacer: error: ' "$work/out.txt")" = 1 ] || fail "not one error line"
grep -qF "the gradient norm has not been finite for 3 steps in a row" "$work/out.txt" || fail "not the skip message"
only_step_2
echo "PASS"
