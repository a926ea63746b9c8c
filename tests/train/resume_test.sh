#!/usr/bin/env bash
# `wallfacer train` end to end under mpirun: an uninterrupted run against one killed after its
# step-10 checkpoint and resumed; then a corrupted newest checkpoint, which the next resume must
# detect and skip; a checkpoint resumed under another sp factorisation (same losses within f32
# summation order); a newest checkpoint of another model, skipped; ranks that each accept other
# checkpoints (MPMD: half the ranks see another directory) agreeing on one step, or all failing;
# then `wallfacer generate`, refusing weights that do not fit and sampling from the result.
#
#   tests/train/resume_test.sh WALLFACER_EXE MPIEXEC [MPIEXEC_FLAGS...]
#
# Passes when every logged loss of the resumed run is bit-identical to the uninterrupted one.
set -euo pipefail
exe="$1"; mpiexec="$2"; shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# 4 ranks as dp 2 x sp 2 (WallFacer C = 1, zigzag), a small model on synthetic tokens, every step
# logged, validation every 5 steps, a checkpoint every 10.
# (The run's arguments apart from its directory: the agreement test below gives each half of the
# ranks its own.)
run_args=("$root/configs/gpt-tiny.yaml"
    --set model.n_layer=2 --set model.d_model=32 --set model.d_ff=64 --set model.max_seq_len=64 \
    --set train.seq_len=64 --set train.micro_batch_size=2 --set train.global_batch_size=8 \
    --set train.steps=20 --set train.warmup_steps=5 --set train.log_every=1 --set train.eval_every=5 \
    --set train.eval_batches=1 --set data.source=synthetic --set checkpoint.every=10 --set checkpoint.keep_last=2)
dir_args() { echo --set checkpoint.dir="$1/checkpoints" --set log.dir="$1"; }
train() {
  local dir="$1"; shift
  # shellcheck disable=SC2046  # dir_args' words are meant to split
  "$mpiexec" -np 4 "$@" "$exe" train "${run_args[@]}" $(dir_args "$dir") ${EXTRA:-}
}
flags=("$@")
losses() { python3 -c 'import json,sys; [print(j["step"], j["loss"], j.get("val_loss","-")) for j in map(json.loads, open(sys.argv[1]))]' "$1"; }

echo "== uninterrupted: 20 steps, ending with the summary (rank 0 only)"
out="$(train "$work/a" "${flags[@]}" 2>&1)" || { echo "FAIL: the uninterrupted run failed"; echo "$out"; exit 1; }
for part in "summary: steps 1-20 in " "tokens/s); loss " "; best val loss " \
            "summary: metrics in $work/a/metrics.jsonl; checkpoints in $work/a/checkpoints (newest: $work/a/checkpoints/step-00000020)" \
            "next: $exe generate --checkpoint $work/a/checkpoints --prompt " "next: scripts/plot-metrics.sh $work/a/metrics.jsonl"; do
  grep -qF -- "$part" <<<"$out" || { echo "FAIL: the summary lacks '$part'"; echo "$out"; exit 1; }
done
[ "$(echo "$out" | grep -c "summary: steps")" = 1 ] || { echo "FAIL: not one summary"; echo "$out"; exit 1; }
echo "== killed after step 10, then resumed"
EXTRA="--stop-after 10" train "$work/b" "${flags[@]}"
test -f "$work/b/checkpoints/step-00000010/manifest.json"
test ! -e "$work/b/checkpoints/step-00000020" || { echo "FAIL: the stopped run went past step 10"; exit 1; }
train "$work/b" "${flags[@]}"
if ! diff <(losses "$work/a/metrics.jsonl") <(losses "$work/b/metrics.jsonl"); then
  echo "FAIL: the resumed run's losses differ from the uninterrupted run's (diff above)"
  exit 1
fi
echo "resumed losses are bit-identical over $(losses "$work/a/metrics.jsonl" | wc -l) logged steps"

echo "== metrics.jsonl carries the keys other tools read, with plausible values"
python3 - "$work/a/metrics.jsonl" <<'PY'
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [j["step"] for j in lines] == list(range(1, 21)), "one line per step (log_every 1)"
number = (int, float)
for j in lines:
    for key in ("loss", "lr", "grad_norm", "tokens_per_s", "flops_per_s", "mfu", "step_s", "elapsed_s"):
        assert isinstance(j[key], number) and math.isfinite(j[key]) and j[key] >= 0, (j["step"], key, j.get(key))
    assert j["loss"] > 0 and j["tokens_per_s"] > 0, j
    # dp 2 x sp 2: the K/V ring sends point to point, the gradient all-reduce is a collective.
    for key in ("p2p_bytes", "collective_bytes", "peak_mem_bytes"):
        assert isinstance(j[key], int) and j[key] > 0, (j["step"], key, j.get(key))
    assert isinstance(j["cached_mem_bytes"], int) and j["cached_mem_bytes"] >= 0, j
    assert j["bytes_by_group"]["sp.ring"] > 0 and j["bytes_by_group"]["dp_sp"] > 0, j["bytes_by_group"]
    assert ("val_loss" in j) == (j["step"] % 5 == 0 or j["step"] == 20), (j["step"], "val_loss every 5 steps")
print(f"metrics: {len(lines)} lines, every required key present")
PY

echo "== a corrupted newest checkpoint is detected and the previous one is used"
newest="$work/b/checkpoints/step-00000020/rank-00000.safetensors"
printf '\x55' | dd of="$newest" bs=1 seek=200 conv=notrunc status=none
out="$(EXTRA="--set train.steps=25" train "$work/b" "${flags[@]}" 2>&1)"
grep -q "step-00000020" <<<"$out" || { echo "FAIL: no warning naming the corrupt checkpoint"; echo "$out"; exit 1; }
grep -q "resumed from the step-10 checkpoint" <<<"$out" || { echo "FAIL: did not fall back to step 10"; echo "$out"; exit 1; }

echo "== the step-20 checkpoint resumed under another layout (sp 4, WallFacer C = 2) continues the same run"
for run in c d; do mkdir -p "$work/$run" && cp -r "$work/a/checkpoints" "$work/$run/checkpoints"; done
EXTRA="--set train.steps=25" train "$work/d" "${flags[@]}" > /dev/null
EXTRA="--set train.steps=25 --set parallel.dp=1 --set parallel.sp=4 --set parallel.C=2 --set train.micro_batch_size=1" \
  train "$work/c" "${flags[@]}" > /dev/null
python3 - "$work/d/metrics.jsonl" "$work/c/metrics.jsonl" <<'PY'
import json, sys
same_layout = {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[1]))}
other_layout = {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[2])) if j["step"] > 20}
assert sorted(other_layout) == [21, 22, 23, 24, 25], sorted(other_layout)
for step, loss in other_layout.items():
    # Same data, same weights; only the f32 summation order differs between the layouts.
    rel = abs(loss - same_layout[step]) / abs(same_layout[step])
    print(f"step {step}: dp2 x sp2 {same_layout[step]:.7f}, sp4 C2 {loss:.7f}, relative difference {rel:.1e}")
    assert rel < 1e-4, "the resumed run under another layout diverged"
PY

echo "== a newest checkpoint written for another model (1 layer, not 2) is skipped like a corrupt one"
EXTRA="--set model.n_layer=1" train "$work/e" "${flags[@]}" > /dev/null
cp -r "$work/e/checkpoints/step-00000020" "$work/one-layer"  # the resumed run below replaces it
rm -rf "$work/e/checkpoints/step-00000010" && cp -r "$work/a/checkpoints/step-00000010" "$work/e/checkpoints/"
out="$(EXTRA="--set train.steps=25" train "$work/e" "${flags[@]}" 2>&1)"
for part in "skipping checkpoint '$work/e/checkpoints/step-00000020'" "written for another model" \
            "tensor 'blocks.1." "resumed from the step-10 checkpoint"; do
  grep -qF "$part" <<<"$out" || { echo "FAIL: resume did not say '$part'"; echo "$out"; exit 1; }
done

echo "== ranks whose checkpoints fit differently agree on the newest step that fits all of them"
# Ranks 0-1 see a/'s steps 10 and 20; ranks 2-3 see step 10 and a 1-layer step 20, which they
# reject: all must resume step 10, not each its own.
mkdir -p "$work/f" "$work/g/checkpoints" "$work/h/checkpoints"
cp -r "$work/a/checkpoints" "$work/f/"
cp -r "$work/a/checkpoints/step-00000010" "$work/g/checkpoints/"
cp -r "$work/one-layer" "$work/g/checkpoints/step-00000020"
# (--stop-after 10: they only resume. A save needs every rank in one checkpoint.dir.)
halves() {  # halves DIR_OF_RANKS_0_1 DIR_OF_RANKS_2_3
  # shellcheck disable=SC2046
  "$mpiexec" "${flags[@]}" -np 2 "$exe" train "${run_args[@]}" $(dir_args "$1") --set train.steps=25 --stop-after 10 \
    : -np 2 "$exe" train "${run_args[@]}" $(dir_args "$2") --set train.steps=25 --stop-after 10
}
out="$(halves "$work/f" "$work/g" 2>&1)" || { echo "FAIL: the ranks did not agree"; echo "$out"; exit 1; }
grep -qF "resumed from the step-10 checkpoint" <<<"$out" || { echo "FAIL: not resumed from step 10"; echo "$out"; exit 1; }
grep -qF "resumed from the step-20" <<<"$out" && { echo "FAIL: a rank resumed step 20"; echo "$out"; exit 1; }
# Ranks 2-3 see no checkpoint at all: they look at another directory, an error on every rank.
if out="$(halves "$work/a" "$work/h" 2>&1)"; then echo "FAIL: ranks that see different directories trained"; exit 1; fi
grep -qF "the ranks found different checkpoints" <<<"$out" || { echo "FAIL: no message"; echo "$out"; exit 1; }
# Ranks 2-3 have only the 1-layer checkpoint, which none of them can use: every rank fails
# (rather than ranks 0-1 waiting for the others forever), rank 0 saying another rank found none.
mkdir -p "$work/i/checkpoints" && cp -r "$work/one-layer" "$work/i/checkpoints/step-00000020"
if out="$(halves "$work/f" "$work/i" 2>&1)"; then echo "FAIL: trained without a common checkpoint"; exit 1; fi
grep -qF "another rank found no checkpoint in $work/f/checkpoints that loads" <<<"$out" ||
  { echo "FAIL: no message from rank 0"; echo "$out"; exit 1; }

echo "== generate names the checkpoint and the tensors when its weights do not fit its config"
# The 1-layer checkpoint given the 2-layer config, its manifest resealed (docs/checkpoints.md).
python3 - "$work/e/checkpoints/step-00000025/manifest.json" "$work/a/checkpoints/step-00000020/manifest.json" <<'PY'
import hashlib, json, sys
manifest = json.load(open(sys.argv[1]))
manifest["config_yaml"] = json.load(open(sys.argv[2]))["config_yaml"].replace("n_layer: 2", "n_layer: 3")
del manifest["manifest_sha256"]
manifest["manifest_sha256"] = hashlib.sha256(json.dumps(manifest, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()
json.dump(manifest, open(sys.argv[1], "w"), indent=2, ensure_ascii=False)
PY
if out="$("$exe" generate --checkpoint "$work/e/checkpoints/step-00000025" --tokens 2 2>&1)"; then
  echo "FAIL: generate accepted weights that do not fit"; exit 1
fi
for part in "checkpoint '$work/e/checkpoints/step-00000025'" "its model state does not fit the model" \
            "tensor 'blocks.2." ; do
  grep -qF "$part" <<<"$out" || { echo "FAIL: generate did not say '$part'"; echo "$out"; exit 1; }
done
if grep -q "strict=false" <<<"$out"; then echo "FAIL: generate suggests strict=false"; echo "$out"; exit 1; fi

echo "== generate from the newest checkpoint"
text="$("$exe" generate --checkpoint "$work/b/checkpoints" --prompt "In the beginning" --tokens 16 --seed 3)"
case "$text" in "In the beginning"*) ;; *) echo "FAIL: generate printed: $text"; exit 1 ;; esac
echo "PASS"
