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

scripts/fetch-kjv.sh data/kjv.txt

exec build/wallfacer demo --data data/kjv.txt "$@"
