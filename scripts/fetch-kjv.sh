#!/usr/bin/env bash
# Writes the demo corpus, the King James Bible from Debian's bible-kjv package, to data/kjv.txt
# (or the path given). `bible` prints chapter headings ("Genesis 1") and numbers each verse
# ("  1 In the ..."); the headings stay, the verse numbers go, so the model sees prose. Written
# under a temporary name first, so an interrupted run never leaves a truncated corpus behind.
#
#   scripts/fetch-kjv.sh [OUT.txt]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/data/kjv.txt}"
if [ -s "$out" ]; then exit 0; fi
if ! command -v bible > /dev/null; then
  echo "fetch-kjv: the 'bible' command is missing; install Debian's bible-kjv (scripts/install-deps.sh)" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
bible 'gen1:1-rev22:21' | sed -E 's/^ +[0-9]+ //' > "$out.partial"
mv "$out.partial" "$out"
echo "fetch-kjv: wrote $out ($(wc -c < "$out") bytes)"
