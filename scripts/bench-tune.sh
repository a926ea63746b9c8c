#!/usr/bin/env bash
# Validates `wallfacer tune`'s cost model on this machine: for worlds 2, 4 and 8 (ranks sharing
# the machine's cores, one OpenMP thread each), calibrate (`tune --calibrate`), measure EVERY
# layout `wallfacer bench layout` runs for a small GPT, predict the same layouts with `wallfacer
# tune --json --cluster calibration-W.yaml`, and print per world each layout's predicted beside
# measured step time and memory, the Spearman rank correlation, the mean absolute % error and
# whether the predicted best measures within 10 % of the measured best (scripts/bench_tune_compare.py;
# targets: Spearman >= 0.8, best within 10 %). docs/tuning.md "Validation on this machine" records
# a run. Measurements are disturbed by anything else running: the load average is printed.
#   scripts/bench-tune.sh [BUILD_DIR] [OUT_DIR (default runs/bench-tune)] [worlds, default "2 4 8"]
# Environment: WF_BENCH_TUNE_STEPS (measured steps per layout, default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
out=${2:-runs/bench-tune}
worlds=${3:-2 4 8}
steps=${WF_BENCH_TUNE_STEPS:-3}
[ -x "$build/wallfacer" ] || scripts/build.sh "$build"
source scripts/mpi-env.sh
mkdir -p "$out"
# gpt-tiny (4 layers, d_model 256, 4 heads, d_ff 1024, 3.2 M parameters) at 256 tokens, 8
# sequences per step in micro batches of 1, so every layout of 2, 4 and 8 ranks trains the same
# 2048 tokens per step (dp 8 one sequence each, dp 1 accumulating 8): ~0.1-1 s per step here.
model=(configs/gpt-tiny.yaml --set train.seq_len=256 --set train.micro_batch_size=1 --set train.global_batch_size=8)
echo "bench-tune: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for world in $worlds; do
  cal=$out/calibration-$world.yaml
  echo "== world $world: calibrate, measure every layout ($steps steps each), predict"
  OMP_NUM_THREADS=1 mpirun -np "$world" "$build/wallfacer" tune --calibrate --out "$cal" >/dev/null
  grep -E '^# (GEMM|attention|memory|p2p|all_reduce|all_gather|reduce_scatter|all_to_all|sync|overlap)' "$cal"
  OMP_NUM_THREADS=1 mpirun -np "$world" "$build/wallfacer" bench layout "${model[@]}" \
    --steps "$steps" --json >"$out/bench-$world.jsonl"
  "$build/wallfacer" tune --model "${model[@]}" --world "$world" --cluster "$cal" --json >"$out/tune-$world.jsonl"
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 scripts/bench_tune_compare.py "$out/bench-$world.jsonl" "$out/tune-$world.jsonl" \
    --json "$out/summary-$world.json"
  echo
done
