#!/usr/bin/env bash
# Packed documents end to end (docs/data.md, "Packed documents"): a folder of JSON Lines files of
# short documents (one gzipped, one in a subfolder) through `wallfacer prepare-text --format jsonl`,
# then `validate` and `train` with data.pack: true under mpirun on 4 ranks with WallFacer: GPT
# (configs/gpt-tiny.yaml, dp 2 x sp 2) and LLaMA (configs/llama-tiny.yaml, sp 4, C 2), each shrunk
# to seconds. Every logged loss must be finite and within 1e-4 relative of one process's packed
# run (documents kept apart and positions restarted the same way on every layout), and packing
# must change the losses (against one process reading the same tokens unpacked).
#
#   tests/train/packed_documents_test.sh WALLFACER_EXE MPIEXEC [MPIEXEC_FLAGS...]
set -euo pipefail
exe="$1"; mpiexec="$2"; shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() {  # fail MESSAGE [LOG]: prints the log, then the message, and stops
  if [ -n "${2:-}" ]; then cat "$2"; fi
  echo "FAIL: $1"; exit 1
}

# Documents of 1 to ~120 characters, seeded: short and long ones beside the 64-token sequences.
mkdir -p "$work/jsonl/more"
python3 - "$work/jsonl" <<'PY'
import gzip, json, random, sys
rng = random.Random(7)
words = "in the beginning god created heaven and earth light was good day night water".split()
def document():
    n = rng.choice([0, 1, 3, 8, 15, 25])
    return " ".join(rng.choice(words) for _ in range(n)) or rng.choice("abc")  # one-token documents too
def write(f, count):
    for _ in range(count):
        f.write(json.dumps({"id": rng.randrange(1000), "text": document()}) + "\n")
out = sys.argv[1]
with open(f"{out}/a.jsonl", "w") as f: write(f, 60)
with open(f"{out}/b.jsonl", "w") as f: write(f, 60)
with gzip.open(f"{out}/more/c.jsonl.gz", "wt") as f: write(f, 60)
PY
"$exe" prepare-text --format jsonl --text-key text --input "$work/jsonl" --output-dir "$work/data" \
  --tokenizer byte --val-fraction 0.1 > "$work/prepare.log" 2>&1 || fail "prepare-text" "$work/prepare.log"
grep -q "3 input file(s)" "$work/prepare.log" && grep -q "^180 documents" "$work/prepare.log" ||
  fail "prepare-text did not read the 180 documents of the 3 files" "$work/prepare.log"
test -f "$work/data/train.docs" || fail "prepare-text wrote no document index" "$work/prepare.log"

size=(--set model.n_layer=2 --set model.d_model=64 --set model.max_seq_len=64 --set train.seq_len=64
      --set train.micro_batch_size=2 --set train.global_batch_size=4 --set train.steps=5 --set train.warmup_steps=2
      --set train.log_every=1 --set train.eval_every=0 --set data.train_path="$work/data/train.bin"
      --set data.val_path="$work/data/val.bin")

run() {  # run NAME CONFIG LAUNCHER... -- SETTINGS...
  local name="$1" config="$2"; shift 2
  local launcher=()
  while [ "$1" != "--" ]; do launcher+=("$1"); shift; done
  shift
  "${launcher[@]}" "$exe" train "$root/configs/$config" "${size[@]}" --set checkpoint.dir="$work/$name/checkpoints" \
    --set log.dir="$work/$name" "$@" > "$work/$name.log" 2>&1 || fail "the $name run failed" "$work/$name.log"
}

# compare RUN REFERENCE SAME: every loss finite; within 1e-4 relative of REFERENCE's (SAME = 1) or,
# for SAME = 0, not all equal to them.
compare() {
  python3 - "$work/$1/metrics.jsonl" "$work/$2/metrics.jsonl" "$3" "$1" "$2" <<'PY'
import json, math, sys
run, ref = ([json.loads(line)["loss"] for line in open(path)] for path in sys.argv[1:3])
same, name, ref_name = sys.argv[3] == "1", sys.argv[4], sys.argv[5]
assert len(run) == len(ref) == 5, f"expected 5 logged steps, got {len(run)} and {len(ref)}"
assert all(isinstance(x, float) and math.isfinite(x) for x in run + ref), f"a loss is not finite: {run} {ref}"
worst = max(abs(a - b) / abs(b) for a, b in zip(run, ref))
print(f"{name} vs {ref_name}: losses {', '.join(f'{x:.5f}' for x in run)}; worst relative difference {worst:.1e}")
if same:
    assert worst <= 1e-4, f"{name} differs from {ref_name} by {worst:.1e} > 1e-4"
else:
    assert worst > 1e-4, f"{name} trains exactly as {ref_name}: packing changed nothing"
PY
}

for model in gpt llama; do
  config="$model-tiny.yaml"
  if [ "$model" = gpt ]; then
    layout=(--set parallel.dp=2 --set parallel.sp=2 --set parallel.C=1); expect="dp 2 x tp 1 x pp 1 x sp 2"
  else
    layout=(--set parallel.dp=1 --set parallel.sp=4 --set parallel.C=2); expect="dp 1 x tp 1 x pp 1 x sp 4"
  fi
  "$exe" validate "$root/configs/$config" -n 4 "${size[@]}" "${layout[@]}" --set data.pack=true \
    > "$work/validate.log" 2>&1 || fail "validate refuses the packed $model run" "$work/validate.log"
  grep -q "^config OK" "$work/validate.log" || fail "validate did not say OK" "$work/validate.log"
  run "$model-single" "$config" -- --set parallel.dp=1 --set parallel.sp=1 --set parallel.C=1 --set data.pack=true
  run "$model-packed" "$config" "$mpiexec" -np 4 "$@" -- "${layout[@]}" --set data.pack=true
  grep -q "$expect" "$work/$model-packed.log" || fail "the run did not use $expect" "$work/$model-packed.log"
  compare "$model-packed" "$model-single" 1
done
run gpt-unpacked gpt-tiny.yaml -- --set parallel.dp=1 --set parallel.sp=1 --set parallel.C=1 --set data.pack=false
compare gpt-single gpt-unpacked 0
echo "packed GPT (dp 2 x sp 2) and LLaMA (sp 4, WallFacer C 2) train as one process does on JSONL documents"
