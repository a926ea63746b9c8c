#!/usr/bin/env bash
# The GPU parity harness (tests/train/device_parity_tolerance.sh, which the gpu-labelled tests and
# scripts/device-check.sh run) tried where there is no GPU, with the test device in the GPU's place
# (its numbers equal the CPU's): GPT at toy sizes, 2 steps, f32. Both sides trained by one call must
# pass; trained by separate calls and compared by a third, as the device check does, too; then a
# loss planted 1e-3 off must fail naming its step, and a run missing its exit status must be an error.
#
#   tests/train/device_parity_harness_test.sh WALLFACER_EXE
set -uo pipefail
exe="$1"
harness="$(dirname "${BASH_SOURCE[0]}")/device_parity_tolerance.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export WF_DEVICE_PARITY_DEVICE=testdev WF_DEVICE_PARITY_SMALL=1 WF_DEVICE_PARITY_STEPS=2 WF_DEVICE_PARITY_DTYPES=f32
export OMP_NUM_THREADS=1

# expect STATUS EXIT TRAIN: a call with WF_DEVICE_PARITY_TRAIN=TRAIN on $work/split exits EXIT and,
# when it compares, prints one line that starts with STATUS (in $line).
expect() {
  local rc
  line="$(WF_DEVICE_PARITY_TRAIN="$3" bash "$harness" gpt "$exe" "$work/split" 2>&1)"
  rc=$?
  echo "$line"
  [ "$rc" = "$2" ] || fail "WF_DEVICE_PARITY_TRAIN=$3: exit status $rc, not $2"
  [ -z "$1" ] || [[ $line == "$1 gpt "* ]] || fail "WF_DEVICE_PARITY_TRAIN=$3: not a $1 line"
}

line="$(bash "$harness" gpt "$exe" 2>&1)" || fail "both sides in one call: $line"
echo "$line"
[[ $line == "PASS gpt (2 steps, testdev vs cpu, "* ]] || fail "both sides in one call: not a PASS line"

expect "" 0 cpu
expect "" 0 device
expect PASS 0 none

python3 - "$work/split/gpt.f32.testdev/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
rows[1]["loss"] *= 1.001
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
expect FAIL 1 none
[[ $line == *"step 2: loss"* ]] || fail "the planted difference's step is not named"

rm "$work/split/gpt.f32.cpu/rc"
expect ERROR 1 none
[[ $line == *"the cpu run: did not finish"* ]] || fail "the missing cpu run is not named"
echo "the harness passes equal runs, and fails a planted difference and a missing run"
