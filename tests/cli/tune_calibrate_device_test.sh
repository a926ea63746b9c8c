#!/usr/bin/env bash
# `wallfacer tune --calibrate --device`: under mpirun at 2 ranks on the test device (the CPU stand-in,
# every measurement on device tensors, device tensors on its stand-in for NCCL) it writes a cluster file
# whose device section and comment say what was measured and that `wallfacer tune` loads and predicts
# with; a device word outside cpu, cuda, testdev, auto is refused naming the choices; --device cuda
# where no GPU is visible fails with one clear message, not a crash (skipped where a GPU is visible).
#
#   tests/cli/tune_calibrate_device_test.sh WALLFACER_EXE SOURCE_DIR OUT MPIEXEC [MPI FLAGS...]
set -euo pipefail
exe="$1" src="$2" out="$3" mpiexec="$4"
shift 4
fail() { echo "FAIL: $*"; exit 1; }
rm -f "$out"
"$mpiexec" -np 2 "$@" "$exe" tune --calibrate --device testdev --transport auto --calibrate-seconds 0.005 --out "$out"
[ -s "$out" ] || fail "no file was written at $out"
cat "$out"
grep -q "^name: calibrated-.*-testdev-np2$" "$out" || fail "the cluster's name does not name the test device"
grep -q "^  name: 'the test device (the CPU stand-in) on 1/2 of " "$out" ||
  fail "the device section does not name the test device"
for comment in "^# Written by .mpirun -np 2 wallfacer tune --calibrate --device testdev --transport auto. on .* at 20" \
               "^# measured on .*test device.*rank 0: testdev:0.*; transport: " "^# versions: wallfacer [0-9]" \
               "^# p2p: 64 B [0-9.]+ us, 1 MiB" "^# overlap: isendrecv"; do
  grep -Eq "$comment" "$out" || fail "no comment line matching '$comment'"
done
# load_cluster reads it: the prediction runs on it (the cluster holds a world of 2).
"$exe" tune --model "$src/configs/gpt-tiny.yaml" --cluster "$out" --world 2 --top 3 | tee /dev/stderr |
  grep -q "^best: " || fail "wallfacer tune did not predict with the file calibrated on the test device"

set +e
err=$("$exe" tune --calibrate --device gpu --out "$out.bad" 2>&1 >/dev/null)
status=$?
set -e
[ "$status" = 2 ] || fail "--device gpu: exit $status, expected 2 (a usage error)"
grep -q -- "--device: gpu not in {cpu,cuda,testdev,auto}" <<<"$err" ||
  fail "--device gpu: expected the choices, got: $err"
[ ! -e "$out.bad" ] || fail "--device gpu wrote $out.bad"

if grep -q "cuda:0 " <<<"$("$exe" info 2>/dev/null)"; then
  echo "a GPU is visible: the check of --device cuda without one is skipped"
else
  set +e
  err=$("$mpiexec" -np 2 "$@" "$exe" tune --calibrate --device cuda --out "$out.bad" 2>&1 >/dev/null)
  status=$?
  set -e
  [ "$status" = 1 ] || fail "--device cuda without a GPU: exit $status, expected 1"
  expected="^wallfacer: error: --device cuda: no CUDA GPU is visible to this process .*use --device cpu or testdev"
  [ "$(grep -c "$expected" <<<"$err")" = 1 ] || fail "expected the --device cuda message exactly once, got: $err"
  [ ! -e "$out.bad" ] || fail "--device cuda without a GPU wrote $out.bad"
fi
echo "PASS"
