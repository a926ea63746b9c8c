#!/usr/bin/env bash
# The tiny preset learns: `mpirun -np 4 wallfacer train configs/gpt-tiny.yaml` (dp 2 x sp 2,
# WallFacer zigzag shards) on the KJV text, with a schedule short enough for CI, must reach a
# validation loss below the corpus's bigram entropy H(next byte | byte), computed here from the
# training split.
#
# Why that threshold: the unigram entropy H(byte) (~3.05 nats on the KJV) is what a model that
# ignores context can reach; the bigram entropy (~2.31 nats) is what the best model seeing ONE
# previous byte can reach. Beating it proves the model uses longer context through attention
# (across sequence-parallel ranks), not just byte frequencies or the previous byte.
#
#   tests/train/learning_test.sh WALLFACER_EXE MPIEXEC [MPIEXEC_FLAGS...]
set -euo pipefail
exe="$1"; mpiexec="$2"; shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if ! "$root/scripts/fetch-kjv.sh" "$work/kjv.txt"; then
  # 77: CTest's SKIP_RETURN_CODE for this test, so a missing corpus shows as SKIPPED, not passed.
  echo "SKIPPED: no KJV text (install Debian's bible-kjv: scripts/install-deps.sh)"; exit 77
fi
"$exe" prepare-text --input "$work/kjv.txt" --output-dir "$work/kjv" --tokenizer byte

read -r unigram bigram < <(python3 - "$work/kjv/train.bin" <<'PY'
import collections, math, struct, sys
raw = open(sys.argv[1], "rb").read()
width = struct.unpack_from("<I", raw, 12)[0]
count = struct.unpack_from("<Q", raw, 16)[0]
fmt = {2: "H", 4: "I"}[width]
tokens = struct.unpack_from("<%d%s" % (count, fmt), raw, 24)
uni = collections.Counter(tokens)
pairs = collections.Counter(zip(tokens, tokens[1:]))
n = len(tokens)
h1 = -sum(c / n * math.log(c / n) for c in uni.values())
h2 = -sum(c / (n - 1) * math.log(c / uni[a]) for (a, _), c in pairs.items())
print(f"{h1:.4f} {h2:.4f}")
PY
)
echo "corpus: unigram entropy $unigram nats, bigram entropy $bigram nats"

# The preset's model, layout, batch and sequence length as they are; only the schedule is
# shortened to fit CI: 300 steps (~4.5 min on the 2-core CI machine) at a higher peak lr.
steps="${WF_LEARNING_STEPS:-300}"
"$mpiexec" -np 4 "$@" "$exe" train "$root/configs/gpt-tiny.yaml" --no-resume \
  --set train.steps="$steps" --set train.warmup_steps=20 --set train.lr="${WF_LEARNING_LR:-2e-3}" --set train.min_lr=2e-4 \
  --set train.log_every=25 --set train.eval_every="$steps" --set train.eval_batches=4 \
  --set data.train_path="$work/kjv/train.bin" --set data.val_path="$work/kjv/val.bin" \
  --set checkpoint.dir="$work/checkpoints" --set log.dir="$work"

val="$(python3 -c 'import json,sys; print([j for j in map(json.loads, open(sys.argv[1])) if "val_loss" in j][-1]["val_loss"])' "$work/metrics.jsonl")"
echo "validation loss after $steps steps: $val nats (threshold: bigram entropy $bigram)"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$val" "$bigram" \
  || { echo "FAIL: the model did not beat the bigram entropy"; exit 1; }
echo "PASS"
