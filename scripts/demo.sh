#!/usr/bin/env bash
# The first command to run: installs the dependencies, builds wallfacer (Release) into build/,
# writes a text corpus (the King James Bible, from Debian's bible-kjv package) to data/kjv.txt
# and trains a tiny byte-level transformer on it for about a minute on a laptop's CPU.
# Extra arguments go to `wallfacer demo`, e.g.  scripts/demo.sh --steps 1000 --layers 4
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build --target wallfacer_cli

if [ ! -s data/kjv.txt ]; then
  mkdir -p data
  echo "demo.sh: writing data/kjv.txt with bible-kjv"
  # `bible` prints chapter headings ("Genesis 1") and numbers each verse ("  1 In the ...");
  # the headings stay, the verse numbers go, so the model sees prose. Written under a temporary
  # name first, so an interrupted run never leaves a truncated corpus behind.
  bible 'gen1:1-rev22:21' | sed -E 's/^ +[0-9]+ //' > data/kjv.txt.partial
  mv data/kjv.txt.partial data/kjv.txt
fi

exec build/wallfacer demo --data data/kjv.txt "$@"
