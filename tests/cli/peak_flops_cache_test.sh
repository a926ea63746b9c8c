#!/usr/bin/env bash
# The peak FLOP/s that MFU is measured against is measured once per machine and kept beside the
# GEMM calibration (src/train/peak_flops.cpp): the first `wallfacer train` measures and writes
# $WF_CACHE_DIR/peak-flops.txt, the next reads the same figure back; a file measured under another
# key is measured again; log.peak_gflops overrides both. The log says which source it used.
#
#   tests/cli/peak_flops_cache_test.sh WALLFACER_EXE
set -euo pipefail
exe="$1"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export WF_CACHE_DIR="$dir/cache"
fail() { echo "FAIL: $*"; exit 1; }
# One step of a tiny model on one rank; prints the log's "mfu is measured against ..." line.
peak_line() {
  "$exe" train "$root/configs/gpt-tiny.yaml" --set model.n_layer=1 --set model.d_model=32 --set model.d_ff=64 \
    --set model.max_seq_len=16 --set train.seq_len=16 --set train.micro_batch_size=1 --set train.global_batch_size=1 \
    --set train.steps=1 --set train.eval_every=0 --set data.source=synthetic --set parallel.dp=1 --set parallel.sp=1 \
    --set checkpoint.dir="$dir/run/checkpoints" --set log.dir="$dir/run" --no-resume "$@" 2>&1 |
    grep "mfu is measured against" || true
  rm -rf "$dir/run"
}
rate() { sed -n 's/.*against \([0-9.]*\) GFLOP\/s.*/\1/p' <<< "$1"; }

first="$(peak_line)"
cache="$dir/cache/peak-flops.txt"
[[ "$first" == *"(measured now, cached in $cache: sgemm ("* ]] || fail "the first run did not measure: '$first'"
[ -f "$cache" ] || fail "no cache file was written"
second="$(peak_line)"
[[ "$second" == *"(cached in $cache: sgemm ("*", measured "* ]] || fail "the second run did not read the cache: '$second'"
[ "$(rate "$first")" = "$(rate "$second")" ] || fail "the cached figure differs: '$first' then '$second'"

# Measured on another machine: measured again and replaced.
sed -i '1s/.*/cpu another; elsewhere/' "$dir/cache/peak-flops.txt"
[[ "$(peak_line)" == *"(measured now, cached in "* ]] || fail "a cache with another key was used"
[[ "$(peak_line)" == *"(cached in "* ]] || fail "the cache was not replaced"
# Corrupt: measured again, no error.
printf 'garbage' > "$dir/cache/peak-flops.txt"
[[ "$(peak_line)" == *"(measured now, cached in "* ]] || fail "a corrupt cache was used"

# The config's figure wins, and the log says so.
[[ "$(peak_line --set log.peak_gflops=123.5)" == *"against 123.5 GFLOP/s per rank (log.peak_gflops)"* ]] ||
  fail "log.peak_gflops was not used"
echo "PASS: measured once ($(rate "$first") GFLOP/s), then read back from the cache"
