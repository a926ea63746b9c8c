#!/usr/bin/env bash
# A GPU's training parity (scripts/device-check.sh, and the train_device_parity_cuda_* tests where a
# GPU is visible): each model's preset (configs/gpt-tiny.yaml, llama-tiny.yaml, dit-fashion.yaml)
# trains in one process for WF_DEVICE_PARITY_STEPS (20) steps with train.device=cuda and with
# train.device=cpu, in each dtype of WF_DEVICE_PARITY_DTYPES ("f32 bf16"): f32 with TF32 off (the
# default) and bf16 mixed precision. Every logged loss must be finite on both devices and within
# 1e-4 relative of the CPU's in f32, 2e-2 in bf16 (the issue's bounds: a GPU sums in another order
# than the CPU, and the differences grow over the steps). One line per model says how close they
# came; the exit status is 1 when any model failed.
#
#   WF_DEVICE_PARITY_DEVICE=cuda tests/train/device_parity_tolerance.sh gpt|llama|dit|all WALLFACER_EXE [WORK_DIR]
#
# (tests/train/device_parity_test.sh with the same arguments comes here.) GPT and LLaMA train on
# synthetic tokens, DiT on Fashion-MNIST ($WF_FASHION_MNIST_DIR, default
# /usr/share/datasets/fashion-mnist: the train split, else the t10k split, which is small enough to
# take to a GPU machine; synthetic images without either), so nothing else needs to be there. The
# runs' logs and metrics stay in WORK_DIR (default: a temporary directory, removed at the end when
# every model passed).
# WF_DEVICE_PARITY_SET adds --set arguments to every run (e.g. a smaller model for a quick try).
# WF_DEVICE_PARITY_DEVICE=testdev compares the test device instead, which tries the harness on a
# machine without a GPU.
set -euo pipefail
if [ "$#" -lt 2 ]; then
  echo "usage: WF_DEVICE_PARITY_DEVICE=cuda $0 gpt|llama|dit|all WALLFACER_EXE [WORK_DIR]" >&2
  exit 2
fi
models="$1"; exe="$2"; work="${3:-}"
device="${WF_DEVICE_PARITY_DEVICE:-cuda}"
steps="${WF_DEVICE_PARITY_STEPS:-20}"
dtypes="${WF_DEVICE_PARITY_DTYPES:-f32 bf16}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ "$models" = all ] && models="gpt llama dit"
for model in $models; do
  case "$model" in
    gpt|llama|dit) ;;
    *) echo "unknown model '$model': give gpt, llama, dit or all" >&2; exit 2 ;;
  esac
done
[ -x "$exe" ] || { echo "$exe is not an executable (give the path of the wallfacer executable)" >&2; exit 2; }
failed=0
if [ -z "$work" ]; then
  work="$(mktemp -d)"
  trap '[ "$failed" = 0 ] && rm -rf "$work"' EXIT  # a failure's logs stay
fi
mkdir -p "$work"

# settings MODEL: sets `config` to the preset in one process, the run's length and logging, and its
# data (named in `data`).
settings() {
  config=(--set parallel.dp=1 --set parallel.tp=1 --set parallel.pp=1 --set parallel.sp=1 --set parallel.C=1
          --set train.steps="$steps" --set train.log_every=1 --set train.eval_every=0 --set checkpoint.every=0)
  case "$1" in
    gpt|llama)
      config=("$root/configs/$1-tiny.yaml" "${config[@]}" --set data.source=synthetic)
      data="synthetic tokens" ;;
    dit)
      config=("$root/configs/dit-fashion.yaml" "${config[@]}" --set data.source=synthetic) data="synthetic images"
      local dir="${WF_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}" split
      for split in train t10k; do
        if [ -f "$dir/$split-images-idx3-ubyte.gz" ] && [ -f "$dir/$split-labels-idx1-ubyte.gz" ]; then
          config+=(--set data.source=file --set data.train_path="$dir/$split-images-idx3-ubyte.gz"
                   --set data.train_labels_path="$dir/$split-labels-idx1-ubyte.gz" --set data.val_path=
                   --set data.val_labels_path=)
          data="Fashion-MNIST $split split"
          return
        fi
      done ;;
  esac
}

# run MODEL DTYPE DEVICE: one training run into $work/MODEL.DTYPE.DEVICE (its log: out.txt).
run() {
  local dir="$work/$1.$2.$3" config
  rm -rf "$dir" && mkdir -p "$dir"
  settings "$1"
  # shellcheck disable=SC2086 # WF_DEVICE_PARITY_SET: more --set arguments, split at spaces
  timeout "${WF_DEVICE_PARITY_TIMEOUT:-300}" "$exe" train "${config[@]}" --set train.dtype="$2" \
    --set train.device="$3" --set checkpoint.dir="$dir/checkpoints" --set log.dir="$dir" \
    ${WF_DEVICE_PARITY_SET:-} > "$dir/out.txt" 2>&1
}

# compare MODEL DTYPE: prints "DTYPE: …" (how close) and succeeds, or "DTYPE: FAIL …" and fails.
compare() {
  local bound=1e-4
  [ "$2" = bf16 ] && bound=2e-2
  python3 - "$work/$1.$2.cpu/metrics.jsonl" "$work/$1.$2.$device/metrics.jsonl" "$2" "$bound" "$device" \
    "$steps" <<'PY'
import json, math, sys
cpu_path, dev_path, dtype, bound, device, steps = sys.argv[1:7]
bound, steps = float(bound), int(steps)
def losses(path):
    return {row["step"]: row["loss"] for row in map(json.loads, open(path))}
cpu, dev = losses(cpu_path), losses(dev_path)
def fail(why):
    print(f"{dtype}: FAIL ({why})")
    sys.exit(1)
if len(cpu) != steps or sorted(cpu) != sorted(dev):
    fail(f"{len(cpu)} steps logged on the cpu, {len(dev)} on {device}; {steps} expected")
worst, worst_step = -1.0, None
for step in sorted(cpu):
    a, b = cpu[step], dev[step]
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        fail(f"step {step}: loss {a} on the cpu, {b} on {device}: not finite")
    difference = abs(b - a) / abs(a)
    if difference > worst:
        worst, worst_step = difference, step
    if difference > bound:
        fail(f"step {step}: loss {b!r} on {device}, {a!r} on the cpu: {difference:.2e} relative, bound {bound:g}")
last = max(cpu)
print(f"{dtype} losses within {worst:.1e} relative (bound {bound:g}, worst at step {worst_step}), "
      f"last {dev[last]:.6f} on {device} vs {cpu[last]:.6f}")
PY
}

for model in $models; do
  start=$SECONDS
  settings "$model"
  line="$model ($steps steps, $device vs cpu, $data):"
  ok=1
  for dtype in $dtypes; do
    # The two runs side by side: the device's leaves the CPU's cores mostly idle.
    run "$model" "$dtype" "$device" &
    device_run=$!
    failures=()
    run "$model" "$dtype" cpu || failures+=(cpu)
    wait "$device_run" || failures+=("$device")
    if [ "${#failures[@]}" -gt 0 ]; then
      for where in "${failures[@]}"; do
        line="$line $dtype: FAIL (the $where run failed: $(tail -1 "$work/$model.$dtype.$where/out.txt"));"
      done
      ok=0
      continue
    fi
    result="$(compare "$model" "$dtype")" || ok=0
    line="$line $result;"
  done
  if [ "$ok" = 1 ]; then
    echo "${line%;}; all finite: OK ($((SECONDS - start)) s)"
  else
    echo "${line%;}: FAIL (logs in $work/$model.*)"
    failed=1
  fi
done
exit "$failed"
