#!/usr/bin/env bash
# `wallfacer tune --calibrate` under mpirun at 2 ranks writes a cluster file that tune::load_cluster
# reads (`wallfacer tune --model ... --cluster FILE` loads it and predicts with it) with sane
# positive values: one node of 2 devices, rates and bandwidths within what a CPU rank can do,
# efficiencies in (0, 1], the measurements recorded in its comments. Leaves the file at OUT for
# the --profile test (tune_profile_test.sh).
#
#   tests/cli/tune_calibrate_test.sh WALLFACER_EXE SOURCE_DIR OUT MPIEXEC [MPI FLAGS...]
set -euo pipefail
exe="$1" src="$2" out="$3" mpiexec="$4"
shift 4
fail() { echo "FAIL: $*"; exit 1; }
rm -f "$out"
"$mpiexec" -np 2 "$@" "$exe" tune --calibrate --calibrate-seconds 0.02 --out "$out"
[ -s "$out" ] || fail "no file was written at $out"
cat "$out"
value() {  # KEY: the number after "KEY:" (the first one)
  sed -n "s/^ *$1: *\([-0-9.e+]*\).*/\1/p" "$out" | head -1
}
# within LOW HIGH VALUE NAME
within() { awk -v lo="$1" -v hi="$2" -v x="$3" 'BEGIN { exit !(x + 0 >= lo && x + 0 <= hi) }' || fail "$4 = $3, expected $1..$2"; }
[ "$(value nodes)" = 1 ] || fail "nodes = $(value nodes), expected 1"
[ "$(value devices_per_node)" = 2 ] || fail "devices_per_node = $(value devices_per_node), expected 2"
within 0.001 1000 "$(value memory_gib)" memory_gib
within 1e-4 100 "$(value matmul_tflops_f32)" matmul_tflops_f32           # 0.1 GFLOP/s .. 100 TFLOP/s
within 1e-4 100 "$(value matmul_tflops_bf16)" matmul_tflops_bf16
for key in matmul_efficiency attention_efficiency_forward attention_efficiency_backward overlap; do
  within 1e-4 1 "$(value $key)" "$key"
done
within 0.01 10000 "$(value memory_gbs)" memory_gbs
# intra_node: {bandwidth_gbs: B, latency_us: L, all_reduce: {bandwidth_gbs: B, latency_us: L}, ...}: the
# link's (P2P) rate, then each collective's; every one of the five primitives.
link=$(grep "intra_node: {" "$out")
rates=$(grep -oE "bandwidth_gbs: [-0-9.e+]+, latency_us: [-0-9.e+]+" <<<"$link")
[ "$(wc -l <<<"$rates")" = 5 ] || fail "expected the link's rate and 4 collectives' in '$link'"
while read -r _ bandwidth _ latency; do
  within 1e-4 10000 "${bandwidth%,}" links.intra_node.bandwidth_gbs
  within 1e-3 1e6 "$latency" links.intra_node.latency_us
done <<<"$rates"
for primitive in all_reduce all_gather reduce_scatter all_to_all; do
  grep -q "$primitive: {bandwidth_gbs" <<<"$link" || fail "no $primitive rate in '$link'"
done
for comment in "^# Written by .mpirun -np 2 wallfacer tune --calibrate. on .* at 20" "^# world 2 rank.*load average" \
               "^# GEMM .*f32 [0-9.]+ GFLOP/s, bf16 [0-9.]+ GFLOP/s" "^# attention .*forward [0-9.]+ GFLOP/s" \
               "^# p2p: 64 B [0-9.]+ us, 1 MiB [0-9.]+ ms between GEMMs" "^# all_reduce: 64 B" "^# all_to_all: 64 B" "^# overlap: isendrecv"; do
  grep -Eq "$comment" "$out" || fail "no comment line matching '$comment'"
done
# load_cluster reads it: the prediction runs on it (the cluster holds a world of 2).
"$exe" tune --model "$src/configs/gpt-tiny.yaml" --cluster "$out" --world 2 --top 3 | tee /dev/stderr |
  grep -q "^best: " || fail "wallfacer tune did not predict with the calibrated file"
# An unwritable --out is refused before measuring: one message, printed once (rank 0), exit 1.
set +e
err=$("$mpiexec" -np 2 "$@" "$exe" tune --calibrate --out /no-such-dir/calibration.yaml 2>&1 >/dev/null)
status=$?
set -e
[ "$status" != 0 ] || fail "an unwritable --out did not fail"
[ "$(grep -c "^wallfacer: error: --out /no-such-dir/calibration.yaml: cannot write the file" <<<"$err")" = 1 ] ||
  fail "expected the --out message exactly once, got: $err"
echo "PASS"
