#!/usr/bin/env bash
# The device seam proven end to end (docs/devices.md): `wallfacer train` with train.device=testdev
# against the same run on the CPU, layout for layout. The test device's memory faults on any host
# touch, so a fallback to host arithmetic anywhere in the step (a kernels::cpu call, a loop over
# data<T>(), an item()) kills the run; its results must equal the CPU's bit for bit: every logged
# loss and gradient norm exactly, and the checkpoint's weight files byte for byte. The test device's
# host synchronisations must stay at most one per logged step (metrics.jsonl's host_syncs).
#
#   tests/train/device_parity_test.sh gpt|llama|dit WALLFACER_EXE MPIEXEC [MPIEXEC_FLAGS...]
#
# Each model runs its own list of layouts below: for GPT every sp strategy (ring, Ulysses,
# WallFacer C 1 and 2, the hybrid), tp, pp (1F1B and interleaved), dp with ZeRO-2, each pair of
# dimensions, bf16, activation checkpointing, packed documents, and a save + resume; LLaMA (packed
# documents among them) and DiT a few layouts each.
# WF_DEVICE_PARITY_ONLY=NAME runs one case (its name as printed).
#
# With WF_DEVICE_PARITY_DEVICE=cuda it is the GPU's parity run instead (each model's preset trained
# on a GPU beside the CPU, within tolerances): tests/train/device_parity_tolerance.sh says how.
#
#   WF_DEVICE_PARITY_DEVICE=cuda tests/train/device_parity_test.sh gpt|llama|dit|all WALLFACER_EXE [WORK_DIR]
set -euo pipefail
if [ -n "${WF_DEVICE_PARITY_DEVICE:-}" ]; then
  exec bash "$(dirname "${BASH_SOURCE[0]}")/device_parity_tolerance.sh" "$@"
fi
model="$1"; exe="$2"; mpiexec="$3"; shift 3
flags=("$@")
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
steps=3

case "$model" in
  gpt)
    base=("$root/configs/gpt-tiny.yaml" --set model.n_layer=4 --set model.d_model=32 --set model.d_ff=64
          --set model.n_head=4 --set model.n_kv_head=4 --set model.max_seq_len=32 --set train.seq_len=32
          --set data.source=synthetic --set train.micro_batch_size=1 --set train.global_batch_size=4) ;;
  llama)
    base=("$root/configs/llama-tiny.yaml" --set model.n_layer=2 --set model.d_model=32 --set model.d_ff=64
          --set model.n_head=4 --set model.n_kv_head=2 --set model.max_seq_len=32 --set train.seq_len=32
          --set data.source=synthetic --set train.micro_batch_size=1 --set train.global_batch_size=4) ;;
  dit)
    data="${WF_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
    if [ ! -f "$data/train-images-idx3-ubyte.gz" ] || [ ! -f "$data/train-labels-idx1-ubyte.gz" ]; then
      echo "SKIPPED: no Fashion-MNIST in $data (apt-get install dataset-fashion-mnist)"; exit 77
    fi
    base=("$root/configs/dit-fashion.yaml" --set model.diffusion=ddpm --set model.image_size=16 --set model.d_model=32
          --set model.n_layer=2 --set model.n_head=4 --set train.seq_len=16 --set train.micro_batch_size=1
          --set train.global_batch_size=4 --set train.eval_every=0
          --set data.train_path="$data/train-images-idx3-ubyte.gz"
          --set data.train_labels_path="$data/train-labels-idx1-ubyte.gz") ;;
  *) echo "usage: $0 gpt|llama|dit WALLFACER_EXE MPIEXEC [MPIEXEC_FLAGS...]" >&2; exit 2 ;;
esac
base+=(--set train.steps=$steps --set train.warmup_steps=1 --set train.log_every=1 --set train.eval_every=0
       --set checkpoint.every=0)

# The cases whose test-device runs use asynchronous streams: between them every stream interaction
# of a step (each sp strategy's transfers, the pipeline's edges in both schedules, ZeRO's bucketed
# reductions, tp's collectives, dp's gradient all-reduce in bf16, a resume). The others run inline,
# at half the time. WF_DEVICE_PARITY_ASYNC_US=N runs every case asynchronously, delays up to N us.
async_cases="|sp 4 wallfacer C 2|sp 4 hybrid|sp 2 ulysses|pp 2 interleaved|dp 2 zero-2|pp 2 x sp 2|"
async_cases+="tp 2 x sp 2, attention checkpointed|dp 2 x sp 2, bf16|tp 2 x sp 2|dp 2 x pp 2|resume|"
async_cases+="sp 4 wallfacer C 2, packed documents|dp 2 x sp 2 ring, packed documents|"

# run NAME DEVICE NP SETTINGS...: one training run; its log, metrics and checkpoint under $work/NAME.DEVICE.
run() {
  local name="$1" device="$2" np="$3"; shift 3
  local dir="$work/$name.$device" launcher=()
  [ "$np" -gt 1 ] && launcher=("$mpiexec" -np "$np" "${flags[@]}")
  mkdir -p "$dir"
  # The async cases' test-device streams run asynchronously (worker threads, random delays up to
  # 20 us): a missing wait between the compute and communication streams shows as other numbers.
  local async=()
  if [ "$device" = testdev ] && { [ -n "${WF_DEVICE_PARITY_ASYNC_US:-}" ] || [[ $async_cases == *"|$name|"* ]]; }; then
    async=(env "WF_TESTDEV_ASYNC=${WF_DEVICE_PARITY_ASYNC_US:-20}")
  fi
  timeout 300 "${async[@]}" "${launcher[@]}" "$exe" train "${base[@]}" --set train.device="$device" \
    --set checkpoint.dir="$dir/checkpoints" --set log.dir="$dir" "$@" > "$dir/out.txt" 2>&1 ||
    { tail -40 "$dir/out.txt" >&2; fail "$name: the $device run failed (its log is above)"; }
}

# compare NAME: the two devices' logged numbers equal exactly, the weights byte for byte, and the
# test device's host synchronisations per logged step within one.
compare() {
  local name="$1" cpu="$work/$1.cpu" dev="$work/$1.testdev"
  python3 - "$cpu/metrics.jsonl" "$dev/metrics.jsonl" "$name" "${WF_DEVICE_PARITY_MAX_SYNCS:-1}" <<'PY' || fail "$name: the test device's run differs from the CPU's"
import json, sys
cpu, dev = ([json.loads(line) for line in open(path)] for path in sys.argv[1:3])
name, limit = sys.argv[3], float(sys.argv[4])
assert cpu and len(cpu) == len(dev), f"{len(cpu)} logged steps on the cpu, {len(dev)} on the test device"
for a, b in zip(cpu, dev):
    for key in ("loss", "grad_norm"):
        if key in a:
            assert a[key] == b[key], f"step {a['step']}: {key} {a[key]!r} on the cpu, {b[key]!r} on the test device"
    syncs = b.get("host_syncs_per_step")
    assert syncs is not None, "metrics.jsonl has no host_syncs_per_step"
    assert syncs <= limit, f"step {b['step']}: {syncs} host synchronisations per step on the test device (at most {limit})"
print(f"{name}: {len(cpu)} steps equal on both devices (last loss {cpu[-1]['loss']!r}), "
      f"{dev[-1]['host_syncs_per_step']} host synchronisation per step")
PY
  local newest; newest="$(ls "$cpu/checkpoints" | tail -1)"
  for file in "$cpu/checkpoints/$newest"/*.safetensors; do
    cmp -s "$file" "$dev/checkpoints/$newest/$(basename "$file")" ||
      fail "$name: $(basename "$file") of $newest differs between the cpu and the test device"
  done
}

# case NAME NP SETTINGS...: both devices, then the comparison.
case_() {
  local name="$1"; shift
  if [ -n "${WF_DEVICE_PARITY_ONLY:-}" ] && [ "$name" != "$WF_DEVICE_PARITY_ONLY" ]; then return; fi
  echo "== $name"
  run "$name" cpu "$@" --set checkpoint.every=$steps
  run "$name" testdev "$@" --set checkpoint.every=$steps
  compare "$name"
}

# packed: the --set arguments of a run on packed documents (data.pack): JSON Lines of documents
# from 1 to 70 bytes, prepared once with the byte tokenizer.
packed() {
  if [ ! -f "$work/docs/train.bin" ]; then
    python3 - "$work/docs.jsonl" <<'PY'
import json, random, sys
rng = random.Random(7)
with open(sys.argv[1], "w") as out:
    for i in range(400):
        text = "".join(rng.choice("abcdefgh ijklmnop.") for _ in range(rng.choice([1, 2, 5, 13, 31, 70])))
        out.write(json.dumps({"text": text}) + "\n")
PY
    "$exe" prepare-text --input "$work/docs.jsonl" --format jsonl --text-key text --output-dir "$work/docs" \
      --tokenizer byte > "$work/docs.log" 2>&1 || { cat "$work/docs.log" >&2; fail "prepare-text of the documents failed"; }
  fi
  echo "--set data.source=file --set data.train_path=$work/docs/train.bin --set data.val_path=$work/docs/val.bin" \
       "--set data.pack=true"
}
one=(--set parallel.dp=1 --set parallel.tp=1 --set parallel.pp=1 --set parallel.sp=1 --set parallel.C=1)
# layout DP TP PP SP [more settings]: the --set arguments of a layout.
layout() { echo "--set parallel.dp=$1 --set parallel.tp=$2 --set parallel.pp=$3 --set parallel.sp=$4 --set parallel.C=1"; }
case "$model" in
  gpt)
    case_ "one process, f32" 1 "${one[@]}"
    case_ "one process, bf16" 1 "${one[@]}" --set train.dtype=bf16
    case_ "one process, attention checkpointed" 1 "${one[@]}" --set model.checkpoint_attention=true
    case_ "sp 2 ring" 2 $(layout 1 1 1 2) --set parallel.sp_strategy=ring
    case_ "sp 2 ulysses" 2 $(layout 1 1 1 2) --set parallel.sp_strategy=ulysses
    case_ "sp 2 wallfacer C 1" 2 $(layout 1 1 1 2) --set parallel.sp_strategy=wallfacer
    case_ "sp 4 wallfacer C 2" 4 $(layout 1 1 1 4) --set parallel.sp_strategy=wallfacer --set parallel.C=2
    case_ "sp 4 hybrid" 4 $(layout 1 1 1 4) --set parallel.sp_strategy=ulysses-wallfacer --set parallel.U=2
    case_ "sp 2 ring, staged transport" 2 $(layout 1 1 1 2) --set parallel.sp_strategy=ring \
      --set comm.gpu_transport=staged
    case_ "tp 2" 2 $(layout 1 2 1 1)
    case_ "pp 2 1f1b" 2 $(layout 1 1 2 1) --set parallel.pp_schedule=1f1b
    case_ "pp 2 interleaved" 2 $(layout 1 1 2 1) --set parallel.pp_schedule=interleaved --set parallel.pp_virtual=2
    case_ "dp 2 zero-2" 2 $(layout 2 1 1 1) --set parallel.zero=2
    case_ "dp 2 x tp 2" 4 $(layout 2 2 1 1)
    case_ "dp 2 x sp 2, bf16" 4 $(layout 2 1 1 2) --set train.dtype=bf16
    case_ "dp 2 x pp 2" 4 $(layout 2 1 2 1)
    case_ "tp 2 x sp 2, attention checkpointed" 4 $(layout 1 2 1 2) --set model.checkpoint_attention=true
    case_ "tp 2 x pp 2" 4 $(layout 1 2 2 1)
    case_ "pp 2 x sp 2" 4 $(layout 1 1 2 2)
    case_ "sp 4 wallfacer C 2, packed documents" 4 $(layout 1 1 1 4) --set parallel.sp_strategy=wallfacer \
      --set parallel.C=2 $(packed)
    if [ -z "${WF_DEVICE_PARITY_ONLY:-}" ] || [ "$WF_DEVICE_PARITY_ONLY" = "save and resume" ]; then
      # Two steps saved, then resumed in a second run to step $steps, alike on both devices: the
      # checkpoint goes from the test device to the files and back.
      echo "== save and resume"
      for device in cpu testdev; do
        run "resume" "$device" 2 $(layout 2 1 1 1) --set train.steps=2 --set checkpoint.every=2
        run "resume" "$device" 2 $(layout 2 1 1 1) --set checkpoint.every=$steps
        grep -q "resum" "$work/resume.$device/out.txt" || fail "the second $device run did not resume"
      done
      compare "resume"
    fi ;;
  llama)
    case_ "one process" 1 "${one[@]}"
    case_ "one process, bf16" 1 "${one[@]}" --set train.dtype=bf16
    case_ "tp 2 x sp 2" 4 $(layout 1 2 1 2)
    case_ "dp 2 x sp 2 ring, packed documents" 4 $(layout 2 1 1 2) --set parallel.sp_strategy=ring $(packed)
    case_ "dp 2 x pp 2" 4 $(layout 2 1 2 1) ;;
  dit)
    case_ "one process" 1 "${one[@]}"
    case_ "dp 2 x sp 2" 4 $(layout 2 1 1 2)
    case_ "tp 2 x pp 2, bf16" 4 $(layout 1 2 2 1) --set train.dtype=bf16 ;;
esac
echo "every $model case trained bit for bit alike on the cpu and the test device"
