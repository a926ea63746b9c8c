#!/usr/bin/env bash
# Every command of README.md's table ("What runs today") runs as written, after the README's one
# setup line (`source scripts/mpi-env.sh`), on this machine: the commands are read from README.md,
# so a new row is covered without an edit here. Each runs briefly: the `shorten` table below
# appends flags that cut training to a few steps and benchmarks to toy sizes (WF_BENCH_QUICK=1 for
# the scripts), nothing else changes. They run in a scratch directory holding links to build/,
# configs/, scripts/ and clusters/, so the data/ and runs/ they write stay out of the tree, in
# dependency order: data preparation first, then every `train` row, then the rest (generate,
# sample and plot read what the training rows wrote), each group in table order. The k-th `train`
# row trains to step k: rows of the same run resume its checkpoint (at any layout), as they would
# for a user, and each still trains a step. Exits 1 naming every row that failed, 77 when the data the
# README's commands read is not installed (Debian's bible-kjv, dataset-fashion-mnist).
#
#   tests/docs/readme_commands_test.sh REPO_ROOT BUILD_DIR SMALL_GPT_SETTINGS...
# SMALL_GPT_SETTINGS: the --set flags of a small GPT (tests/CMakeLists.txt, WF_SMALL_GPT_SETTINGS)
# for the commands that build a trainer per layout.
set -uo pipefail
root=$(realpath "$1")
build=$(realpath "$2")
small_gpt="${*:3}"
readme="$root/README.md"
row_timeout=${WF_README_ROW_TIMEOUT:-180}

for need in "bible:Debian's bible-kjv (the KJV text of scripts/fetch-kjv.sh)" \
            "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz:Debian's dataset-fashion-mnist"; do
  what=${need%%:*}
  if ! command -v "$what" > /dev/null && [ ! -e "$what" ]; then
    echo "SKIP: README's commands need ${need#*:}, which is not installed"
    exit 77
  fi
done

# The README's setup line, as it spells it, before its table.
setup='source scripts/mpi-env.sh'
if ! grep -qF "\`$setup\`" "$readme"; then
  echo "FAIL: README.md no longer says \`$setup\`; this test runs the table after that one line"
  exit 1
fi

# The table's first column: the code span that opens each row of the section.
# shellcheck disable=SC2016  # the backticks are Markdown's, not the shell's
mapfile -t commands < <(awk '/^## /{inside = ($0 == "## What runs today")} inside && /^\| `/' "$readme" |
                        sed -E 's/^\| `([^`]*)`.*/\1/')
if [ "${#commands[@]}" -lt 10 ]; then
  echo "FAIL: found ${#commands[@]} commands in README.md's \"## What runs today\" table; the parser is out of date"
  exit 1
fi

# How to shorten a row: sed expressions on the command, addressed by what it runs. @STEPS@ is the
# step count of this train row. Flags are appended (later values win in the config's --set) or
# replace a size; nothing else of the command changes.
shorten=(
  '/wallfacer train /s|$| --set train.steps=@STEPS@ --set train.eval_every=0 --set train.log_every=1|'
  '/wallfacer generate /s|$| --tokens 8|'
  '/wallfacer sample /s|$| --steps 2|'
  '/wallfacer demo /s|$| --steps 2 --seq 32 --sample 8|'
  '/wallfacer bench attention /s|--seq [0-9]*|--seq 256|'
  '/wallfacer bench attention /s|$| --iters 1|'
  "/wallfacer bench layout /s|\$| --steps 1 $small_gpt|"
  '/wallfacer bench kernels/s|$| --quick|'
  '/wallfacer bench comm/s|$| --max-bytes 16384 --rounds 1 --iters 2|'
  '/wallfacer tune --calibrate/s|$| --calibrate-seconds 0.01|'
  "/wallfacer tune --profile/s|\$| --steps 1 $small_gpt|"
)
sed_args=()
for expression in "${shorten[@]}"; do sed_args+=(-e "$expression"); done

# Dependency order: 0 writes data, 1 trains, 2 reads what they wrote (or needs nothing).
stage() {
  case "$1" in
    *prepare-text* | scripts/fetch-*) echo 0 ;;
    *"wallfacer train "*) echo 1 ;;
    *) echo 2 ;;
  esac
}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
ln -s "$build" "$scratch/build"
for folder in configs scripts clusters; do ln -s "$root/$folder" "$scratch/$folder"; done
cd "$scratch" || exit 1
eval "$setup"
export WF_BENCH_QUICK=1

failed=()
ran=0
trained=0
for s in 0 1 2; do
  for command in "${commands[@]}"; do
    [ "$(stage "$command")" = "$s" ] || continue
    if [ "$s" = 1 ]; then trained=$((trained + 1)); fi
    short=$(printf '%s\n' "$command" | sed "${sed_args[@]}" | sed "s|@STEPS@|$trained|g")
    ran=$((ran + 1))
    start=$SECONDS
    timeout --kill-after=10 "$row_timeout" bash -c "$short" > "$scratch/row.log" 2>&1
    rc=$?
    if [ "$rc" = 0 ]; then
      echo "ok     $((SECONDS - start)) s  $short"
    else
      [ "$rc" = 124 ] && rc="124, over ${row_timeout} s"
      echo "FAILED (exit $rc) after $((SECONDS - start)) s: $short"
      sed 's/^/    | /' "$scratch/row.log" | tail -n 25
      failed+=("$command")
    fi
  done
done

echo "$ran README commands run in ${SECONDS} s, ${#failed[@]} failed"
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'FAILED README row: %s\n' "${failed[@]}"
  exit 1
fi
