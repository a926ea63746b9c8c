#!/usr/bin/env bash
# The GEMM calibration is kept per machine (kernels/cpu/gemm_select.cpp): the first `wallfacer
# info` measures and writes $WF_CACHE_DIR/gemm-backend.txt, the second reads the same choice
# back; a cache measured under another key (another CPU) is measured again, and a corrupt or
# unwritable cache is no error.
#
#   tests/cli/gemm_cache_test.sh WALLFACER_EXE
set -euo pipefail
exe="$1"
dir="$(mktemp -d)"
trap 'chmod -R u+w "$dir"; rm -rf "$dir"' EXIT
export WF_CACHE_DIR="$dir/cache"
unset WF_CPU_GEMM
field() { "$exe" info | sed -n "s/^gemm\.$1: *//p"; }
fail() { echo "FAIL: $*"; exit 1; }

first="$(field reason)"
case "$first" in
  oneDNN:*) echo "SKIPPED: this build has no oneDNN, so nothing is measured ($first)"; exit 77 ;;
  "measured at first use"*) ;;
  *) fail "the first run did not measure: '$first'" ;;
esac
[ -f "$dir/cache/gemm-backend.txt" ] || fail "no cache file was written"
backend="$(field backend)"
second="$(field reason)"
[[ "$second" == "cached in $dir/cache/gemm-backend.txt: measured at first use"* ]] || fail "the second run did not read the cache: '$second'"
[ "$(field backend)" = "$backend" ] || fail "the cached backend differs from the measured one"

# Measured on another machine: measured again and replaced.
sed -i '1s/.*/cpu another; OPENBLAS_CORETYPE=; elsewhere/' "$dir/cache/gemm-backend.txt"
[[ "$(field reason)" == "measured at first use"* ]] || fail "a cache with another key was used"
[[ "$(field reason)" == "cached in "* ]] || fail "the cache was not replaced"

# Corrupt, then unwritable: measured, no error.
printf 'garbage' > "$dir/cache/gemm-backend.txt"
[[ "$(field reason)" == "measured at first use"* ]] || fail "a corrupt cache was used"
rm -f "$dir/cache/gemm-backend.txt"
chmod a-w "$dir/cache"
if [ "$(id -u)" != 0 ]; then  # root writes anyway
  [[ "$(field reason)" == "measured at first use"* ]] || fail "an unwritable cache directory broke info"
fi
"$exe" info > /dev/null || fail "info failed with an unwritable cache directory"
echo "PASS: measured once ($backend), then read back from the cache"
