#!/usr/bin/env bash
# Before/after GPT training-step speed of two builds of wallfacer on this machine, alternating:
# each round runs `wallfacer bench gpt --json` of BEFORE then AFTER, each in its own process, so a
# slow minute on a shared machine hits both. Prints every round, each side's median, and the ratio
# after/before of the medians (below 1: the change made the step faster). The CPU is printed: only
# ratios measured in one run compare. Each run is printed with /proc/loadavg's 1-minute average read
# before it and the CPU other processes used during it (cores, /proc/stat less our run's own); a
# WARNING says when the machine was not idle (LOAD_MAX, default 0.5, for the load before the first
# run and for the others' cores during every run: later load averages count our own runs).
#
# Usage: scripts/bench-gpt-compare.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR
# Environment: ROUNDS (default 5), STEPS (timed steps per run, default 5),
#   SHAPES: "tiny" (4 layers, d 256, B 4, T 256, 1 thread), "gpt2" (GPT-2 124M, B 4, T 64, 2
#   threads) or "both" (default); WF_BENCH_QUICK=1 shrinks both to toy shapes (tests the script).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cpu-accounting.sh"  # read_cpu, read_children
[[ $# == 2 ]] || { echo "usage: $0 BEFORE_BUILD_DIR AFTER_BUILD_DIR" >&2; exit 2; }
before=$1/wallfacer after=$2/wallfacer
for exe in "$before" "$after"; do
  [[ -x $exe ]] || { echo "$exe: no wallfacer there; build it first (scripts/build.sh DIR)" >&2; exit 2; }
done
rounds=${ROUNDS:-5} steps=${STEPS:-5} shapes=${SHAPES:-both} load_max=${LOAD_MAX:-0.5}
[[ $load_max =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "LOAD_MAX=$load_max: need a number such as 0.5" >&2; exit 2; }
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
  local r side exe json load1 _ busy0 total0 child0
  for ((r = 1; r <= rounds; r++)); do
    for side in before after; do
      exe=$before; [[ $side == after ]] && exe=$after
      read -r load1 _ </proc/loadavg
      read_cpu; busy0=$cpu_busy; total0=$cpu_total
      read_children; child0=$child_cpu
      json=$("$exe" bench gpt "$@" --steps "$steps" --warmup 1 --json | tail -1)
      read_cpu; read_children
      echo "$side $r $load1 $((cpu_busy - busy0)) $((cpu_total - total0)) $((child_cpu - child0)) $json" >>"$out"
    done
  done
  python3 - "$name" "$out" "$(nproc)" "$load_max" "$judge_load" <<'PY'
import json, statistics, sys
name, path, cores, load_max = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
judge_load = sys.argv[5] == "1"  # the script's first run: later load averages count our own runs
runs = {"before": [], "after": []}
busy = []
for line in open(path):
    side, r, load1, busy_ticks, total_ticks, ours, text = line.split(" ", 6)
    # Others' cores during the run: busy ticks of all CPUs less our run's own, over the run's ticks
    # per core (total ticks count every core).
    others = max(0, int(busy_ticks) - int(ours)) / max(1, int(total_ticks)) * cores
    runs[side].append((int(r), json.loads(text)["ms_per_step"], float(load1), others))
    first = judge_load and r == "1" and side == "before"
    if (first and float(load1) > load_max) or others > load_max:
        busy.append(f"{side} round {r}")
print(f"\n{name}: ms/step per round, before and after (load1 before the run, others' cores during it)")
for (r, b, lb, ob), (_, a, la, oa) in zip(runs["before"], runs["after"]):
    print(f"  round {r}: {b:9.2f} (load {lb:.2f}, others {ob:.2f})  {a:9.2f} (load {la:.2f}, others {oa:.2f})")
mb = statistics.median(v for _, v, _, _ in runs["before"])
ma = statistics.median(v for _, v, _, _ in runs["after"])
print(f"  median:  {mb:9.2f}  {ma:9.2f}   after/before = {ma / mb:.3f}")
if busy:
    print(f"WARNING: the machine was not idle (LOAD_MAX {load_max:g}) in: {', '.join(busy)}; rerun on an idle "
          "machine before trusting the ratio")
PY
  rm -f "$out"
  judge_load=0
}
judge_load=1
[[ $shapes == tiny || $shapes == both ]] && compare "tiny preset, f32, 1 thread" "${tiny[@]}"
[[ $shapes == gpt2 || $shapes == both ]] && compare "GPT-2 124M shapes, f32, 2 threads" "${gpt2[@]}"
exit 0
