#!/usr/bin/env bash
# The first command to run: the project's real job on this machine's CPU, in a few minutes.
#   1. installs the dependencies and builds wallfacer (Release) into build/;
#   2. writes the King James Bible (Debian's bible-kjv) to data/kjv.txt and tokenises it
#      (byte-level) into data/kjv/{train,val}.bin;
#   3. trains configs/gpt-tiny.yaml under mpirun on 4 ranks — 2 data-parallel replicas x 2
#      sequence-parallel ranks of WallFacer attention — for WF_DEMO_STEPS steps (default 150,
#      about two minutes on 2 cores), printing a progress line with the ETA, into runs/demo/;
#   4. samples text from the checkpoint it wrote with `wallfacer generate`.
# The single-process transformer demo of the early days is still `build/wallfacer demo`.
#
#   scripts/demo.sh                 # WF_DEMO_STEPS=600 scripts/demo.sh for better text
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build --target wallfacer_cli

scripts/fetch-kjv.sh data/kjv.txt
if [ ! -s data/kjv/train.bin ]; then
  build/wallfacer prepare-text --input data/kjv.txt --output-dir data/kjv --tokenizer byte
fi

steps="${WF_DEMO_STEPS:-150}"
ranks=4
mpi_flags=()
# Open MPI refuses root and more ranks than cores unless told.
if [ "$(id -u)" -eq 0 ]; then mpi_flags+=(--allow-run-as-root); fi
mpi_flags+=(--oversubscribe)
# One OpenMP thread per rank when the ranks outnumber the cores.
threads=$(( $(nproc) / ranks )); [ "$threads" -ge 1 ] || threads=1
# Each demo is a new run: --no-resume refuses a checkpoint.dir that holds an earlier demo's.
rm -rf runs/demo/checkpoints
echo "== demo: mpirun -np $ranks wallfacer train configs/gpt-tiny.yaml ($steps steps, $threads thread(s) per rank)"
OMP_NUM_THREADS="$threads" mpirun -np "$ranks" "${mpi_flags[@]}" -x OMP_NUM_THREADS \
  build/wallfacer train configs/gpt-tiny.yaml --no-resume \
  --set train.steps="$steps" --set train.eval_every="$steps" \
  --set checkpoint.dir=runs/demo/checkpoints --set checkpoint.every=0 --set log.dir=runs/demo

echo "== demo: wallfacer generate --checkpoint runs/demo/checkpoints --prompt \"And God said\""
exec build/wallfacer generate --checkpoint runs/demo/checkpoints --prompt "And God said" --tokens 300 "$@"
