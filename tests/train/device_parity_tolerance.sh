#!/usr/bin/env bash
# A device's training parity, the one implementation of "train N steps on a device and on the CPU,
# compare the losses": each model's preset (configs/gpt-tiny.yaml, llama-tiny.yaml, dit-fashion.yaml)
# trains in one process for WF_DEVICE_PARITY_STEPS (20) steps with train.device=cuda (or
# WF_DEVICE_PARITY_DEVICE) and with train.device=cpu, in each dtype of WF_DEVICE_PARITY_DTYPES
# ("f32 bf16"): f32 with TF32 off (the default) and bf16 mixed precision. Every logged loss and
# gradient norm must be finite on both devices and every loss within 1e-4 relative of the CPU's in
# f32, 2e-2 in bf16 (the issue's bounds: a GPU sums in another order than the CPU, and the
# differences grow over the steps); tests/train/compare_losses.py compares. One line per model:
#
#   PASS|FAIL|ERROR MODEL (STEPS steps, DEVICE vs cpu, DATA): DTYPE: how close (each run's seconds); ...
#
# FAIL: the numbers differ; ERROR: a run did not finish (it failed, timed out, or had no time left).
# The exit status is 1 when any model did not pass, 2 on a usage error.
#
#   tests/train/device_parity_tolerance.sh gpt|llama|dit|all WALLFACER_EXE [WORK_DIR]
#
# Callers: the train_device_parity_cuda_* tests where a GPU is visible (tests/train/device_parity_test.sh
# with WF_DEVICE_PARITY_DEVICE set comes here), and scripts/device-check.sh's parity and sp4 phases
# (there WALLFACER_EXE is a wrapper that sets the libraries' path, or launches 4 ranks).
#
# The runs: GPT with two micro batches per step (the gradient accumulation on the device too), a
# warm-up of a quarter of the steps (so the last steps run at the full learning rate); GPT and LLaMA
# on the repository's README and docs as bytes (prepared once into WORK_DIR/text), DiT on
# Fashion-MNIST ($WF_FASHION_MNIST_DIR, default /usr/share/datasets/fashion-mnist: the train
# split, else the t10k split; synthetic images without either), so nothing else needs to be there.
# Each run's folder WORK_DIR/MODEL.DTYPE.SIDE (SIDE: the device, or cpu) holds its log (out.txt),
# metrics.jsonl, and rc: "EXIT_STATUS LIMIT_S SECONDS" (exit status 124 or 137: timed out; 125: not
# started, no time left before the deadline). WORK_DIR defaults to a temporary folder, removed at
# the end when every model passed.
#
# Environment:
#   WF_DEVICE_PARITY_DEVICE    the device beside the CPU (cuda; testdev tries this on a machine without a GPU)
#   WF_DEVICE_PARITY_STEPS     steps per run (20); WF_DEVICE_PARITY_DTYPES the dtypes ("f32 bf16")
#   WF_DEVICE_PARITY_SMALL=1   toy model sizes (a quick try on a small CPU)
#   WF_DEVICE_PARITY_SET       more --set arguments for every run, split at spaces, after the script's own
#   WF_DEVICE_PARITY_TIMEOUT   seconds per run (300)
#   WF_DEVICE_PARITY_DEADLINE  seconds since the epoch by which every run must end: each run's limit is
#                              cut to it, and a run left under 5 s does not start (a caller's time budget)
#   WF_DEVICE_PARITY_TRAIN     both (the default): per dtype, the two runs side by side, then each model's
#                              line; cpu or device: that side's runs only, a line per run, no comparison;
#                              none: no runs, the lines of the runs already in WORK_DIR. So a caller can
#                              start the CPU's runs early, in the background on part of the cores, and
#                              compare once the device's are done (scripts/device-check.sh does).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
usage() {
  echo "usage: [WF_DEVICE_PARITY_DEVICE=cuda] $0 gpt|llama|dit|all WALLFACER_EXE [WORK_DIR]" >&2
  [ "$#" -gt 0 ] && echo "$*" >&2
  exit 2
}
[ "$#" -ge 2 ] || usage
models="$1" exe="$2" work="${3:-}"
device="${WF_DEVICE_PARITY_DEVICE:-cuda}"
steps="${WF_DEVICE_PARITY_STEPS:-20}"
dtypes="${WF_DEVICE_PARITY_DTYPES:-f32 bf16}"
sides="${WF_DEVICE_PARITY_TRAIN:-both}"
[ "$models" = all ] && models="gpt llama dit"
for model in $models; do
  case "$model" in gpt|llama|dit) ;; *) usage "unknown model '$model': give gpt, llama, dit or all" ;; esac
done
case "$device" in
  cpu|"") usage "WF_DEVICE_PARITY_DEVICE is '$device': name the device to compare with the cpu (cuda)" ;;
esac
case "$sides" in
  both|cpu|device|none) ;;
  *) usage "WF_DEVICE_PARITY_TRAIN is '$sides': give both, cpu, device or none" ;;
esac
[[ $steps =~ ^[1-9][0-9]*$ ]] || usage "WF_DEVICE_PARITY_STEPS is '$steps': give a number of steps, at least 1"
[ -x "$exe" ] || usage "$exe is not an executable (give the path of the wallfacer executable)"
failed=0
if [ -z "$work" ]; then
  [ "$sides" = both ] || usage "WF_DEVICE_PARITY_TRAIN=$sides: give the WORK_DIR that the calls share"
  work="$(mktemp -d)"
  trap '[ "$failed" = 0 ] && rm -rf "$work"' EXIT  # a failure's logs stay
fi
mkdir -p "$work" || exit 2

# The text GPT and LLaMA train on, prepared once per WORK_DIR. Two calls at once (the CPU's runs
# and the device's) may both prepare it: the same bytes, and the second's mv fails harmlessly.
prepare_text() {
  [ -f "$work/text/train.bin" ] && return 0
  local tmp
  tmp="$(mktemp -d "$work/text.XXXXXX")" || return 1
  cat "$root/README.md" "$root"/docs/*.md > "$tmp/input.txt"
  if ! "$exe" prepare-text --input "$tmp/input.txt" --output-dir "$tmp/text" --tokenizer byte > "$tmp/log.txt" 2>&1
  then
    echo "preparing the text of README.md and docs/ failed: $(tail -3 "$tmp/log.txt")" >&2
    return 1
  fi
  mv -T "$tmp/text" "$work/text" 2>/dev/null
  rm -rf "$tmp"
}

# settings MODEL: sets `config` to the arguments of MODEL's runs (its preset in one process, the
# run's length and logging, its data) and `data` to a word on the data.
settings() {
  config=(--set parallel.dp=1 --set parallel.tp=1 --set parallel.pp=1 --set parallel.sp=1 --set parallel.C=1
          --set train.steps="$steps" --set train.warmup_steps=$((steps / 4 + 1)) --set train.log_every=1
          --set train.eval_every=0 --set checkpoint.every=0)
  case "$1" in
    gpt|llama)
      config=("$root/configs/$1-tiny.yaml" "${config[@]}" --set data.train_path="$work/text/train.bin"
              --set data.val_path="$work/text/val.bin")
      data="README and docs as bytes" ;;
    dit)
      config=("$root/configs/dit-fashion.yaml" "${config[@]}" --set data.source=synthetic) data="synthetic images"
      local dir="${WF_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}" split
      for split in train t10k; do
        if [ -f "$dir/$split-images-idx3-ubyte.gz" ] && [ -f "$dir/$split-labels-idx1-ubyte.gz" ]; then
          config+=(--set data.source=file --set data.train_path="$dir/$split-images-idx3-ubyte.gz"
                   --set data.train_labels_path="$dir/$split-labels-idx1-ubyte.gz" --set data.val_path=
                   --set data.val_labels_path=)
          data="Fashion-MNIST $split split"
          break
        fi
      done ;;
  esac
  [ "$1" = gpt ] && config+=(--set train.global_batch_size=8)  # two micro batches of 4
  if [ "${WF_DEVICE_PARITY_SMALL:-0}" = 1 ]; then
    local kv_heads=4
    [ "$1" = llama ] && kv_heads=2  # LLaMA's grouped-query attention kept
    case "$1" in
      gpt|llama) config+=(--set model.n_layer=1 --set model.d_model=32 --set model.d_ff=64 --set model.n_head=4
                          --set model.max_seq_len=32 --set train.seq_len=32 --set train.micro_batch_size=1
                          --set train.global_batch_size=2 --set model.n_kv_head="$kv_heads") ;;
      dit) config+=(--set model.image_size=16 --set model.d_model=32 --set model.n_layer=1 --set model.n_head=4
                    --set train.seq_len=16 --set train.micro_batch_size=2 --set train.global_batch_size=2) ;;
    esac
  fi
}

# limit: a run's time limit in seconds, WF_DEVICE_PARITY_TIMEOUT cut to the deadline.
limit() {
  local lim="${WF_DEVICE_PARITY_TIMEOUT:-300}"
  if [ -n "${WF_DEVICE_PARITY_DEADLINE:-}" ]; then
    local left=$((WF_DEVICE_PARITY_DEADLINE - $(date +%s)))
    [ "$left" -lt "$lim" ] && lim=$left
  fi
  echo $((lim < 0 ? 0 : lim))
}

# run MODEL DTYPE SIDE: one training run into $work/MODEL.DTYPE.SIDE; fails when it did not finish.
run() {
  local dir="$work/$1.$2.$3" lim rc start=$SECONDS config data
  rm -rf "$dir" && mkdir -p "$dir"
  lim="$(limit)"
  if [ "$lim" -lt 5 ]; then
    rc=125
  else
    settings "$1"
    # shellcheck disable=SC2086 # WF_DEVICE_PARITY_SET: more --set arguments, split at spaces
    timeout -k 5 "$lim" "$exe" train "${config[@]}" --set train.dtype="$2" --set train.device="$3" \
      --set checkpoint.dir="$dir/checkpoints" --set log.dir="$dir" ${WF_DEVICE_PARITY_SET:-} > "$dir/out.txt" 2>&1
    rc=$?
  fi
  echo "$rc $lim $((SECONDS - start))" > "$dir/rc"
  return "$rc"
}

# outcome DIR: "N s" for a run that finished, or why it did not and the end of its log (and fails).
outcome() {
  local rc lim seconds
  if [ ! -f "$1/rc" ] || ! read -r rc lim seconds < "$1/rc"; then
    echo "did not finish (stopped, or never started)"
    return 1
  fi
  case "$rc" in
    0) echo "$seconds s"; return 0 ;;
    124|137) echo -n "timed out after $lim s" ;;
    125) echo "not started: under 5 s left before the deadline"; return 1 ;;
    *) echo -n "exit status $rc after $seconds s" ;;
  esac
  echo "; its output ends: $(tail -3 "$1/out.txt" 2>/dev/null | tr '\n' ' ' | cut -c1-300)"
  return 1
}

# report MODEL: the model's line from the runs in $work; fails unless every dtype passed.
report() {
  local model="$1" status=PASS line="" dtype side bound detail errors took config data
  settings "$model"
  for dtype in $dtypes; do
    errors="" took=""
    for side in "$device" cpu; do
      if detail="$(outcome "$work/$model.$dtype.$side")"; then took="$took, $side $detail"
      else errors="$errors; the $side run: $detail"
      fi
    done
    if [ -n "$errors" ]; then
      line="$line; $dtype: ERROR ${errors#; }"
      [ "$status" = PASS ] && status=ERROR
      continue
    fi
    bound=1e-4
    [ "$dtype" = bf16 ] && bound=2e-2
    detail="$(python3 "$here/compare_losses.py" "$work/$model.$dtype.$device/metrics.jsonl" \
      "$work/$model.$dtype.cpu/metrics.jsonl" "$bound" "$steps" --labels "$device" cpu)" || status=FAIL
    line="$line; $dtype: $detail (${took#, })"
  done
  echo "$status $model ($steps steps, $device vs cpu, $data): ${line#; }"
  [ "$status" = PASS ]
}

case " $models " in
  *" gpt "* | *" llama "*) [ "$sides" = none ] || prepare_text || exit 1 ;;
esac
for model in $models; do
  case "$sides" in
    both)
      for dtype in $dtypes; do
        run "$model" "$dtype" "$device" &  # the device's run leaves the CPU's cores mostly idle
        device_run=$!
        run "$model" "$dtype" cpu
        wait "$device_run"
      done
      report "$model" || failed=1 ;;
    none) report "$model" || failed=1 ;;
    cpu|device)
      side=cpu
      [ "$sides" = device ] && side="$device"
      for dtype in $dtypes; do
        run "$model" "$dtype" "$side"
        detail="$(outcome "$work/$model.$dtype.$side")" || failed=1
        echo "$model $dtype on $side: $detail"
      done ;;
  esac
done
exit "$failed"
