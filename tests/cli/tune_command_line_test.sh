#!/usr/bin/env bash
# `wallfacer tune --model` ends with what acting on its answer takes: a legend that explains each
# field of the best layout's name with the key that sets it, and the `mpirun -np N build/wallfacer
# train CFG --set ...` line that trains it (the user's own --set included). Given to `wallfacer
# validate` with the same config, world and flags, that line validates and names the same layout.
#
#   tests/cli/tune_command_line_test.sh WALLFACER_EXE SOURCE_DIR
set -euo pipefail
exe="$1" src="$2"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$exe" tune --model "$src/configs/gpt-7b.yaml" --cluster "$src/clusters/h100-8x8.yaml" --seq 65536 --world 32 \
  --set train.lr=1e-4 >"$out"
cat "$out"
best=$(sed -n 's/^best: \([^,]*\), .*/\1/p' "$out")
[ -n "$best" ] || fail "no 'best:' line"
for field in ${best//./ }; do
  grep -Eq "^  $field +[^ ].*\((parallel|train|model)\.[A-Za-z_]+" "$out" || fail "the legend does not explain '$field'"
done
line=$(grep -E "^  mpirun -np 32 build/wallfacer train " "$out") || fail "no 'mpirun -np 32 ... train' line"
grep -q -- "--write-best FILE.yaml" "$out" || fail "no word of --write-best"
[[ "$line" == *"--set train.lr=0.0001"* ]] || fail "the command line drops the user's --set train.lr=1e-4"
[[ "$line" == *"--set train.seq_len=65536"* ]] || fail "the command line drops --seq 65536"

# The line as bash reads it: mpirun -np N build/wallfacer train CFG --set k=v ...
eval "set -- $line"
[ "$1 $2 $4 $5" = "mpirun -np build/wallfacer train" ] || fail "unexpected command line: $line"
world="$3" config="$6"
shift 6
validated=$("$exe" validate "$config" -np "$world" --any-machine "$@") || fail "the printed line does not validate"
echo "$validated"
# validate's summary names the best layout's degrees.
degrees=$(sed -E 's/^dp([0-9]+)\.tp([0-9]+)\.pp([0-9]+)\.sp([0-9]+).*/dp \1 x tp \2 x pp \3 x sp \4/' <<<"$best")
grep -q "world $world = $degrees," <<<"$validated" || fail "validate's layout is not $degrees ($best)"
strategy=$(cut -d. -f5 <<<"$best")
grep -q "sp_strategy $strategy " <<<"$validated" || fail "validate's sp_strategy is not $strategy ($best)"
echo "PASS"
