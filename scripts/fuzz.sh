#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang-14 (ASan + UBSan) into build-fuzz/ and
# runs each for a while on a copy of its seed corpus (docs/fuzzing.md).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS defaults to 60 per target; TARGETs are the names under tests/fuzz/corpus/ (safetensors,
# checkpoint, token_file, config, gpt2_tokenizer, idx, jsonl, document_index), all by default.
# Prints one line per target (executions, exec/s, corpus size, OK or CRASHED) and ends with
# "fuzz: N passed, M failed";
# exits non-zero when any target crashed, leaked, hung or ran out of memory. A crashing input is
# kept in build-fuzz/artifacts/<target>/; reproduce with build-fuzz/tests/fuzz/fuzz_<target> FILE.
# Environment:
#   WF_FUZZ_BUILD_DIR  build directory (default build-fuzz)
#   WF_JOBS            parallel build jobs (default: all cores)
#   WF_FUZZ_PARALLEL   targets run at once (default: all cores)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

seconds="${1:-60}"
if [ "$#" -gt 0 ]; then shift; fi
case "$seconds" in
  '' | *[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;;
esac
all_targets=(safetensors checkpoint token_file config gpt2_tokenizer idx jsonl document_index)
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [ -d "tests/fuzz/corpus/$t" ] || { echo "fuzz.sh: unknown target '$t' (one of: ${all_targets[*]})" >&2; exit 2; }
done

build_dir="${WF_FUZZ_BUILD_DIR:-build-fuzz}"
case "$build_dir" in
  /*) ;;
  *) build_dir="$root/$build_dir" ;;
esac

# As scripts/build.sh: ccache hashes paths relative to the repository, so another checkout on
# this machine reuses what was compiled here.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"

# -O1: fast enough to compile on two cores, and the level libFuzzer's documentation uses.
# Asserts stay on (no -DNDEBUG): a failed assert is a finding too. No tests, no CUDA: only the
# fuzz targets are built.
cmake -S "$root" -B "$build_dir" -G Ninja \
  -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 \
  -DWF_FUZZ=ON -DWF_BUILD_TESTS=OFF -DWF_CUDA=OFF -DWF_SANITIZE= >/dev/null
cmake --build "$build_dir" -j "${WF_JOBS:-$(nproc)}" --target "${targets[@]/#/fuzz_}"

# Leaks are findings (libFuzzer checks after each input that allocated more than it freed);
# UBSan stops at the first report so that libFuzzer saves the input.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# One thread each: the machine is shared, and the parsers do not use OpenMP.
export OMP_NUM_THREADS=1

# A number from libFuzzer's final stats (-print_final_stats) in the log of the current target.
stat() { sed -nE "s/^stat::$1: *([0-9]+).*/\1/p" "$log" | tail -n 1; }

# Runs target $1 for $seconds on a copy of its corpus, into its log; its exit code in a file.
run_target() {
  local t="$1" corpus="$build_dir/corpus/$1" artifacts="$build_dir/artifacts/$1/" log="$build_dir/fuzz-$1.log"
  # A copy: the run adds the inputs it finds, which must not creep into the repository.
  rm -rf "$corpus" "$artifacts"
  mkdir -p "$corpus" "$artifacts"
  cp -r "tests/fuzz/corpus/$t/." "$corpus/"
  set +e
  "$build_dir/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts" "$corpus" >"$log" 2>&1
  echo $? >"$build_dir/fuzz-$t.rc"
}

# WF_FUZZ_PARALLEL targets at a time (default: one per core): each target still gets its full
# SECONDS, the step takes 1/N of the time.
parallel="${WF_FUZZ_PARALLEL:-$(nproc)}"
running=0
for t in "${targets[@]}"; do
  run_target "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$parallel" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

passed=0
failed=0
for t in "${targets[@]}"; do
  corpus="$build_dir/corpus/$t"
  artifacts="$build_dir/artifacts/$t/"
  log="$build_dir/fuzz-$t.log"
  rc="$(cat "$build_dir/fuzz-$t.rc")"
  execs="$(stat number_of_executed_units)"
  rate="$(stat average_exec_per_sec)"
  files="$(find "$corpus" -type f | wc -l)"
  if [ "$rc" -eq 0 ] && [ -z "$(ls -A "$artifacts")" ]; then
    verdict="OK"
    passed=$((passed + 1))
  else
    verdict="CRASHED (exit $rc; input in $artifacts, log $log)"
    failed=$((failed + 1))
    # The report itself: the sanitizer's or libFuzzer's, whichever stopped the run.
    grep -E -A 30 "^==[0-9]+==ERROR|runtime error|deadly signal|uncaught exception|timeout after|out-of-memory" \
      "$log" | head -n 40 >&2 || true
  fi
  echo "fuzz_$t: ${execs:-?} execs, ${rate:-?} exec/s, corpus $files files, $verdict"
done

echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
