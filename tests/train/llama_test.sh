#!/usr/bin/env bash
# The LLaMA preset end to end under mpirun: configs/llama-tiny.yaml (sp 4, WallFacer C 2), shrunk
# to a smoke run on synthetic tokens with fewer steps than its warmup (which trains, with a
# warning that the warmup is cut), then `wallfacer generate` from its checkpoint.
#
#   tests/train/llama_test.sh WALLFACER_EXE MPIEXEC [MPIEXEC_FLAGS...]
set -euo pipefail
exe="$1"; mpiexec="$2"; shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$mpiexec" -np 4 "$@" "$exe" train "$root/configs/llama-tiny.yaml" \
  --set model.n_layer=2 --set model.d_model=64 --set model.d_ff=96 --set model.max_seq_len=64 \
  --set train.seq_len=64 --set train.micro_batch_size=2 --set train.global_batch_size=4 \
  --set train.steps=8 --set train.log_every=1 --set train.eval_every=0 --set data.source=synthetic \
  --set checkpoint.dir="$work/checkpoints" --set log.dir="$work" 2>&1 | tee "$work/train.log"
grep -q "the warmup is cut at step 8" "$work/train.log" || { echo "FAIL: no warning that the warmup is cut"; exit 1; }
grep -q "model: llama with" "$work/train.log" || { echo "FAIL: the run did not build the llama model"; exit 1; }
test -f "$work/checkpoints/step-00000008/manifest.json" || { echo "FAIL: no step-8 checkpoint"; exit 1; }
test "$(wc -l < "$work/metrics.jsonl")" -eq 8 || { echo "FAIL: expected 8 metrics lines"; exit 1; }

"$exe" generate --checkpoint "$work/checkpoints" --prompt "And God said" --tokens 40 --seed 3 > "$work/text.out"
bytes=$(wc -c < "$work/text.out")
test "$bytes" -ge 13 || { echo "FAIL: generate printed $bytes bytes"; exit 1; }
echo "llama-tiny trained 8 steps on 4 ranks (sp 4, WallFacer C 2) and generated $bytes bytes"
