#!/usr/bin/env bash
# A stop signal during `wallfacer train` (docs/training.md, "Interrupting a run"): a 2-rank run
# sent SIGTERM after its first step saves a checkpoint at the next step boundary, says where and
# how to resume, and exits 143; the resume continues from that checkpoint. Then the same through
# mpirun, as Ctrl-C reaches a job: mpirun forwards SIGTERM to the ranks after
# odls_base_sigkill_timeout seconds, which must leave the ranks time to save.
#
#   tests/cli/train_signal_test.sh WALLFACER_EXE MPIEXEC [MPIEXEC_FLAGS...]
set -euo pipefail
exe="$1"; mpiexec="$2"; shift 2
flags=("$@")
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; cat "$work/out.txt" >&2 2>/dev/null || true; exit 1; }

# A model small enough that a step takes milliseconds, and more steps than the test lets it run.
args=("$root/configs/gpt-tiny.yaml" --set model.n_layer=1 --set model.d_model=32 --set model.d_ff=64
      --set model.max_seq_len=32 --set train.seq_len=32 --set train.micro_batch_size=1
      --set train.global_batch_size=2 --set train.steps=1000000 --set train.log_every=1 --set train.eval_every=0
      --set data.source=synthetic --set parallel.dp=2 --set parallel.sp=1 --set checkpoint.every=0
      --set checkpoint.dir="$work/checkpoints" --set log.dir="$work/logs")

# Starts the run in the background (its pid in $run) and waits for the line $1 of its log; the
# run's other arguments follow.
start() {
  local wanted="$1"; shift
  "$mpiexec" "${flags[@]}" -np 2 "$exe" train "${args[@]}" "$@" > "$work/out.txt" 2>&1 &
  run=$!
  for _ in $(seq 600); do
    grep -q "$wanted" "$work/out.txt" && return 0
    kill -0 "$run" 2> /dev/null || fail "the run ended before its first step"
    sleep 0.1
  done
  fail "no first step within 60 s"
}
# The step the run stopped at, from its message; checks the message and the checkpoint.
stopped_step() {
  local line step
  line="$(grep -o "stopped by $1 after step [0-9]*: resume with \`.*\`" "$work/out.txt")" || fail "no stop message"
  step="$(echo "$line" | sed 's/.*after step \([0-9]*\):.*/\1/')"
  grep -qF "checkpoint: step $step saved to $work/checkpoints/step-$(printf %08d "$step")" "$work/out.txt" ||
    fail "no line saying where the checkpoint went"
  [ -f "$work/checkpoints/step-$(printf %08d "$step")/manifest.json" ] || fail "no checkpoint of step $step"
  grep -qF "train $root/configs/gpt-tiny.yaml --set model.n_layer=1" <<<"$line" ||
    fail "the resume command lacks the run's arguments"
  echo "$step"
}

echo "== SIGTERM to the ranks (as a scheduler sends it): checkpoint, message, exit 143"
start "step 1/"
kill -TERM $(pgrep -P "$run")
status=0; wait "$run" || status=$?
[ "$status" = 143 ] || fail "exit status $status, expected 143"
step="$(stopped_step SIGTERM)"
echo "stopped after step $step"

echo "== the resumed run continues from that checkpoint"
"$mpiexec" "${flags[@]}" -np 2 "$exe" train "${args[@]}" --set train.steps=$((step + 2)) > "$work/out.txt" 2>&1 ||
  fail "the resumed run failed"
grep -qF "resumed from the step-$step checkpoint" "$work/out.txt" || fail "not resumed from step $step"
grep -q "summary: steps $((step + 1))-$((step + 2)) in " "$work/out.txt" ||
  fail "no summary of steps $((step + 1))-$((step + 2))"

echo "== SIGINT to mpirun (Ctrl-C): mpirun sends the ranks SIGTERM after odls_base_sigkill_timeout s"
rm -rf "$work/checkpoints"
# (Few log lines: once interrupted, mpirun stops reading the ranks' output, and a rank that logs
# every step would block on it before it reaches the step boundary.)
export OMPI_MCA_odls_base_sigkill_timeout=4
start "mfu is measured" --set train.log_every=1000000
sleep 1
kill -INT "$run"
wait "$run" || true  # mpirun's own status: 1 (it does not pass on the ranks')
# (The stop message may be lost: a stopping mpirun no longer forwards the ranks' output.)
compgen -G "$work/checkpoints/step-*/manifest.json" > /dev/null || fail "no checkpoint after Ctrl-C to mpirun"
echo "PASS"
