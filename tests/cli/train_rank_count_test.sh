#!/usr/bin/env bash
# `wallfacer train` started with another number of ranks than its config's layout needs: every
# rank fails alike, so rank 0 alone prints one line (saying all ranks agree) with the count and the
# mpirun line to run, and the ranks end through MPI_Finalize with status 1: no MPI_ABORT banner.
# `validate` refuses the same world the same way. Ranks that fail with different messages print
# each once with its ranks; a rank that fails alone (the other waits in a collective) still ends
# the job within seconds, through MPI_Abort.
#
#   tests/cli/train_rank_count_test.sh WALLFACER_EXE MPIEXEC [MPIEXEC_FLAGS...]
set -euo pipefail
exe="$1"; mpiexec="$2"; shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; echo "$out"; exit 1; }
cfg="$root/configs/gpt-tiny.yaml"  # dp 2 x sp 2: 4 ranks
sets=(--set data.source=synthetic --set checkpoint.dir="$work/checkpoints" --set log.dir="$work/logs")

echo "== train on 2 ranks"
status=0; out="$("$mpiexec" "$@" -np 2 "$exe" train "$cfg" "${sets[@]}" 2>&1)" || status=$?
[ "$status" = 1 ] || fail "exit status $status, expected 1"
[ "$(grep -c "wallfacer: error:" <<< "$out")" = 1 ] || fail "not exactly one error line"
grep -qF "wallfacer: error: $cfg needs 4 ranks (dp 2 x tp 1 x pp 1 x sp 2), but this job has 2: run \`mpirun" <<< "$out" ||
  fail "the message does not name the ranks needed"
grep -qE -- "-np 4 [^ ]*wallfacer train $cfg --set data.source=synthetic --set checkpoint.dir=.*\` .*\(all 2 ranks agree\)" \
  <<< "$out" ||
  fail "no mpirun line with the run's --set flags, or no 'all 2 ranks agree'"
# One size changed alone would fit 2 ranks, and the suggestion passes validation.
grep -qF -- "or, with 2 ranks as now: \`" <<< "$out" || fail "no layout of 2 ranks suggested"
grep -qi "MPI_ABORT\|ORTE_ERROR_LOG" <<< "$out" && fail "MPI_Abort's noise"

echo "== train without mpirun, and validate with its default -n 1"
status=0; out="$("$exe" train "$cfg" "${sets[@]}" 2>&1)" || status=$?
[ "$status" = 1 ] || fail "train: exit status $status, expected 1"
grep -qF "needs 4 ranks (dp 2 x tp 1 x pp 1 x sp 2), but this job has 1: run \`mpirun" <<< "$out" || fail "train"
suggested="$(sed -n 's/.*or, with 1 rank as now: `\([^`]*\)`.*/\1/p' <<< "$out")"
[ -n "$suggested" ] || fail "no one-rank layout suggested"
status=0; out="$("$exe" validate "$cfg" "${sets[@]}" 2>&1)" || status=$?
[ "$status" = 1 ] || fail "validate: exit status $status, expected 1"
grep -qF "needs 4 ranks (dp 2 x tp 1 x pp 1 x sp 2), but validate checks it for 1 (-n 1): check it with \`" <<< "$out" ||
  fail "validate"
# The one-rank layout suggested validates as it is.
read -r -a words <<< "${suggested/ train / validate }"
out="$("${words[@]}" 2>&1)" || fail "the suggested layout does not validate: $suggested"
echo "== ranks that fail differently: each message once, with its ranks"
two=("$cfg" --set parallel.dp=2 --set parallel.sp=1 --set checkpoint.dir="$work/checkpoints" --set log.dir="$work/logs")
status=0
out="$("$mpiexec" "$@" -np 1 "$exe" train "${two[@]}" --set data.train_path="$work/missing-a.bin" \
       : -np 1 "$exe" train "${two[@]}" --set data.train_path="$work/missing-b.bin" 2>&1)" || status=$?
[ "$status" = 1 ] || fail "exit status $status, expected 1"
unreadable="invalid config for a world of 2 ranks: data.train_path: cannot read the token file"
grep -qF "wallfacer: error: [rank 0 of 2] $unreadable '$work/missing-a.bin'" <<< "$out" || fail "rank 0's message"
grep -qF "wallfacer: error: [rank 1 of 2] $unreadable '$work/missing-b.bin'" <<< "$out" || fail "rank 1's message"
[ "$(grep -c "wallfacer: error:" <<< "$out")" = 2 ] || fail "not one line per distinct message"

echo "== a rank that fails alone ends the job within seconds"
start=$SECONDS; status=0
out="$("$mpiexec" "$@" -np 1 "$exe" train "${two[@]}" --set data.source=synthetic \
       : -np 1 "$exe" train "${two[@]}" --set data.train_path="$work/missing-b.bin" 2>&1)" || status=$?
[ "$status" != 0 ] || fail "the job succeeded"
[ $((SECONDS - start)) -lt 60 ] || fail "the job took $((SECONDS - start)) s to end"
grep -qF "wallfacer: error: [rank 1/2] invalid config" <<< "$out" || fail "the failing rank's message"
echo "PASS"
