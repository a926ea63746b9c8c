#!/usr/bin/env bash
# `wallfacer tune --profile` under mpirun at 2 ranks on a tiny GPT: the top 2 predicted layouts run
# one step each, the table shows both with predicted and measured step time and memory, the
# measured winner is written as a run config that config::load_config reads back (`wallfacer tune
# --model` parses it), --plot draws a PNG; bad input ends every rank with one message, printed
# once, and no --cluster without calibration.yaml here is refused naming the fix.
#
#   tests/cli/tune_profile_test.sh WALLFACER_EXE SOURCE_DIR CLUSTER.yaml MPIEXEC [MPI FLAGS...]
set -euo pipefail
exe="$1" src="$2" cluster="$3" mpiexec="$4"
shift 4
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
tiny=(--set model.n_layer=1 --set model.d_model=32 --set model.n_head=2 --set model.n_kv_head=2 --set model.d_ff=64
      --set model.max_seq_len=32 --set train.seq_len=32 --set train.micro_batch_size=1 --set train.global_batch_size=2)
plot=()
[ -x /usr/bin/gnuplot ] && plot=(--plot "$dir/profile.png")
"$mpiexec" -np 2 "$@" "$exe" tune --profile "$src/configs/gpt-tiny.yaml" "${tiny[@]}" --cluster "$cluster" --top 2 \
  --steps 1 --write-best "$dir/best.yaml" "${plot[@]}" >"$dir/out.txt"
cat "$dir/out.txt"
grep -q "^wallfacer tune --profile: .*world 2, seq 32, 2 sequences per step; the top 2 of [0-9]* predicted layouts" \
  "$dir/out.txt" || fail "no header"
grep -q "rank  layout .*predicted ms  measured ms    error   predicted MiB   measured MiB" "$dir/out.txt" || fail "no table head"
rows=$(grep -cE "^ +[12]  dp[0-9]+\.tp[0-9]+\.pp[0-9]+\.sp[0-9]+\S* +[0-9.]+ +[0-9.]+ +[-+][0-9]+% +[0-9.]+ +[0-9.]+$" "$dir/out.txt" || true)
[ "$rows" = 2 ] || fail "expected 2 measured rows, got $rows"
best=$(sed -n 's/^measured best: \([^,]*\), [0-9.]* ms per step (predicted rank [12], [0-9.]* ms)$/\1/p' "$dir/out.txt")
[ -n "$best" ] || fail "no 'measured best' line"
grep -q "^# The fastest of the top 2 .*: $best, " "$dir/best.yaml" || fail "best.yaml does not name $best"
# The written config reads back (load_config through `wallfacer tune --model`) with the winner's layout.
"$exe" tune --model "$dir/best.yaml" --cluster "$cluster" --world 2 --json >"$dir/again.jsonl" ||
  fail "the written config does not load"
for n in dp tp pp sp; do
  want=$(sed -E "s/.*\b$n([0-9]+).*/\1/" <<<"$best")
  grep -Eq "^  $n: $want$" "$dir/best.yaml" || fail "best.yaml's parallel.$n is not $want ($best)"
done
if [ ${#plot[@]} -gt 0 ]; then
  [ "$(head -c 4 "$dir/profile.png" | tail -c 3)" = PNG ] || fail "--plot wrote no PNG"
fi

# Bad input: the same message on every rank, printed once (rank 0), exit status 1.
set +e
"$mpiexec" -np 2 "$@" "$exe" tune --profile "$dir/no-such-config.yaml" --cluster "$cluster" 2>"$dir/err.txt"
status=$?
set -e
cat "$dir/err.txt"
[ "$status" != 0 ] || fail "a missing config did not fail"
[ "$(grep -c "^wallfacer: error: cannot read config file '.*no-such-config.yaml'" "$dir/err.txt")" = 1 ] ||
  fail "expected the missing config's message exactly once"
# No --cluster and no calibration.yaml here.
(cd "$dir" && "$exe" tune --model "$src/configs/gpt-tiny.yaml" 2>"$dir/err2.txt") && fail "no cluster did not fail"
grep -q "no --cluster given and no calibration.yaml in the working directory; pass --cluster FILE.yaml" "$dir/err2.txt" ||
  fail "no cluster: wrong message: $(cat "$dir/err2.txt")"
echo "PASS"
