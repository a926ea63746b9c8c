#!/usr/bin/env bash
# The first command to run: the project's real job on this machine's CPU, in a few minutes.
#   1. installs the dependencies and builds wallfacer (Release) into build/, saying first how many
#      build steps are left and roughly how long they take, then showing their progress;
#   2. writes the King James Bible (Debian's bible-kjv) to data/kjv.txt and tokenises it
#      (byte-level) into data/kjv/{train,val}.bin;
#   3. trains configs/gpt-tiny.yaml under mpirun on 4 ranks as one sequence-parallel group of
#      WallFacer attention with teams of C = 2 (dp 1 x sp 4: the preset's own dp 2 x sp 2 can
#      only have C = 1), for WF_DEMO_STEPS steps (default 150, about three minutes on 2 cores: the
#      preset's own layout stepped 1.4x faster in a side-by-side run), printing a progress line with
#      the ETA, into runs/demo/;
#   4. samples text from the checkpoint it wrote with `wallfacer generate`.
# The single-process transformer demo of the early days is still `build/wallfacer demo`.
#
#   scripts/demo.sh                 # WF_DEMO_STEPS=600 scripts/demo.sh for better text
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
echo "== demo: configuring the build (CMake)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
# A cold build is most of a first run: say what is built and roughly how long before it starts.
# Measured: a cold build of the executable and its library is ~170 steps and 519 s of compiler time
# (~3 s a step), i.e. ~4.5 minutes on 2 idle cores and up to 12 on a busy or slower machine.
if [ ! -x build/wallfacer ]; then
  cores=$(nproc)
  total=$(ninja -C build -t commands wallfacer_cli | wc -l)
  echo "== demo: building wallfacer (the library and the command-line tool, C++20, Release): up to $total" \
       "steps, from scratch roughly $(( (total * 3 + cores * 60 - 1) / (cores * 60) )) minute(s) on $cores idle" \
       "cores (more on a busy machine, less where ccache has the objects); progress as [steps done/total, seconds]"
fi
NINJA_STATUS="[%f/%t, %es] " cmake --build build --target wallfacer_cli

scripts/fetch-kjv.sh data/kjv.txt
if [ ! -s data/kjv/train.bin ]; then
  build/wallfacer prepare-text --input data/kjv.txt --output-dir data/kjv --tokenizer byte
fi

steps="${WF_DEMO_STEPS:-150}"
ranks=4
# Open MPI's settings for root and for more ranks than cores (the README's setup line); wallfacer
# gives each rank cores / ranks OpenMP threads.
source scripts/mpi-env.sh
# Each demo is a new run: --no-resume refuses a checkpoint.dir that holds an earlier demo's.
rm -rf runs/demo/checkpoints
layout=(--set parallel.dp=1 --set parallel.sp=4 --set parallel.C=2)
echo "== demo: mpirun -np $ranks wallfacer train configs/gpt-tiny.yaml ${layout[*]} ($steps steps: WallFacer" \
     "sequence parallelism over 4 ranks in teams of C = 2)"
mpirun -np "$ranks" build/wallfacer train configs/gpt-tiny.yaml --no-resume "${layout[@]}" \
  --set train.steps="$steps" --set train.eval_every="$steps" \
  --set checkpoint.dir=runs/demo/checkpoints --set checkpoint.every=0 --set log.dir=runs/demo

echo "== demo: wallfacer generate --checkpoint runs/demo/checkpoints --prompt \"And God said\""
exec build/wallfacer generate --checkpoint runs/demo/checkpoints --prompt "And God said" --tokens 300 "$@"
