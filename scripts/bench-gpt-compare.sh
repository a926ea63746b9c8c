#!/usr/bin/env bash
# Before/after GPT training-step speed of two builds of wallfacer on this machine, alternating:
# each round runs `wallfacer bench gpt --json` of BEFORE then AFTER, each in its own process, so a
# slow minute on a shared machine hits both. Prints every round, each side's median, and the ratio
# after/before of the medians (below 1: the change made the step faster). The CPU is printed: only
# ratios measured in one run compare.
#
# Usage: scripts/bench-gpt-compare.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR
# Environment: ROUNDS (default 5), STEPS (timed steps per run, default 5),
#   SHAPES: "tiny" (4 layers, d 256, B 4, T 256, 1 thread), "gpt2" (GPT-2 124M, B 4, T 64, 2
#   threads) or "both" (default); WF_BENCH_QUICK=1 shrinks both to toy shapes (tests the script).
set -euo pipefail
[[ $# == 2 ]] || { echo "usage: $0 BEFORE_BUILD_DIR AFTER_BUILD_DIR" >&2; exit 2; }
before=$1/wallfacer after=$2/wallfacer
for exe in "$before" "$after"; do
  [[ -x $exe ]] || { echo "$exe: no wallfacer there; build it first (scripts/build.sh DIR)" >&2; exit 2; }
done
rounds=${ROUNDS:-5} steps=${STEPS:-5} shapes=${SHAPES:-both}
(( rounds >= 3 )) || { echo "ROUNDS=$rounds: at least 3 rounds are needed for a median" >&2; exit 2; }
tiny=(--layers 4 --d-model 256 --heads 4 --vocab 256 --batch 4 --seq 256 --threads 1)
gpt2=(--layers 12 --d-model 768 --heads 12 --vocab 50257 --batch 4 --seq 64 --threads 2)
if [[ ${WF_BENCH_QUICK:-0} == 1 ]]; then
  tiny=(--layers 1 --d-model 32 --heads 2 --vocab 256 --batch 1 --seq 64 --threads 1)
  gpt2=(--layers 1 --d-model 64 --heads 2 --vocab 512 --batch 1 --seq 32 --threads 2)
  steps=1
fi
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "before: $before ($(git -C "$(dirname "$before")/.." rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "after:  $after ($(git -C "$(dirname "$after")/.." rev-parse --short HEAD 2>/dev/null || echo '?'))"

compare() {  # compare NAME ARGS...
  local name=$1; shift
  local out; out=$(mktemp)
  for ((r = 1; r <= rounds; r++)); do
    for side in before after; do
      local exe=$before; [[ $side == after ]] && exe=$after
      local json; json=$("$exe" bench gpt "$@" --steps "$steps" --warmup 1 --json | tail -1)
      echo "$side $r $json" >>"$out"
    done
  done
  python3 - "$name" "$out" <<'PY'
import json, statistics, sys
name, path = sys.argv[1], sys.argv[2]
runs = {"before": [], "after": []}
for line in open(path):
    side, r, text = line.split(" ", 2)
    runs[side].append((int(r), json.loads(text)["ms_per_step"]))
print(f"\n{name}: ms/step per round (before, after)")
for (r, b), (_, a) in zip(runs["before"], runs["after"]):
    print(f"  round {r}: {b:9.2f} {a:9.2f}")
mb = statistics.median(v for _, v in runs["before"])
ma = statistics.median(v for _, v in runs["after"])
print(f"  median:  {mb:9.2f} {ma:9.2f}   after/before = {ma / mb:.3f}")
PY
  rm -f "$out"
}
[[ $shapes == tiny || $shapes == both ]] && compare "tiny preset, f32, 1 thread" "${tiny[@]}"
[[ $shapes == gpt2 || $shapes == both ]] && compare "GPT-2 124M shapes, f32, 2 threads" "${gpt2[@]}"
exit 0
