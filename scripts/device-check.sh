#!/usr/bin/env bash
# The GPU path checked in one call on the GPU machine (issue 28's device check; docs/gpu.md):
#
#   scripts/device-pack.sh              on the CPU machine: the sm_90 build + libraries -> device-pack/
#   scripts/device-check.sh [PACK_DIR]  on the GPU machine, from the repository root, device-pack carried
#
# Phases, each with its own time limit inside one budget (WF_DEVICE_CHECK_BUDGET_S, default 345 s,
# so the whole stays within 6 minutes), each reported as PASS, FAIL (ran, wrong) or ERROR (could
# not run: missing, timed out):
#   setup     the pack's .debs unpacked into a prefix under /tmp (never onto /); LD_LIBRARY_PATH for
#             our binaries only: the prefix, then the machine's CUDA, cuBLAS, cuDNN and NCCL (found
#             in /usr/local/cuda and the nvidia/* packages of python3's site-packages, printed);
#             the relocated Open MPI (OPAL_PREFIX, PMIx's paths) proven with mpirun -np 2 uname -n
#   versions  GPU, driver, CUDA runtime, cuBLAS, cuDNN, NCCL (nvidia-smi, `wallfacer info`, the
#             libraries' file names)
#   tests     every CUDA test: test_cuda (and test_dist's [cuda] cases under mpirun when packed)
#   parity    GPT-tiny, LLaMA-tiny and DiT-fashion, 20 steps each in f32 and bf16, on the GPU and on
#             this machine's CPU (started first, in the background on half the cores): every logged
#             loss within 1e-4 relative (f32, TF32 off) or 2e-2 (bf16), all finite; one line per
#             model (tests/train/device_parity_tolerance.sh, which the gpu-labelled tests run too)
#   sp4       LLaMA-tiny as sp 4 WallFacer C 2, 4 processes sharing the GPU (MPI staging), beside
#             the one-process GPU run: losses within 1e-4 (the same script's runs)
#   layouts   LLaMA-tiny as ring, Ulysses, WallFacer C 1 and the hybrid, tp x sp, pp x sp and
#             dp x sp with ZeRO-2, 2 or 4 processes sharing the GPU (staged), each beside the
#             one-process GPU run: losses within 1e-4
#   spbench   `wallfacer bench attention` per strategy, 4 processes sharing the GPU, 16K tokens,
#             d 128, causal: time, compute-only, communication-only, overlap, bytes vs formulas
#   bench     bf16 GEMM 8192³ (`wallfacer bench device`) beside torch.matmul; causal attention
#             fwd+bwd, 8192 tokens, d 128, beside SDPA; GPT-tiny and GPT-2 124M step times beside
#             PyTorch on the same GPU (scripts/bench_torch_gpu.py) -> the table, also in $OUT/table.md
#   speed     (not in the default list: its own call, WF_DEVICE_CHECK_PHASES=speed, whose budget
#             default is 540 s) issue 31's targets, each beside PyTorch in the same run: a bf16 GEMM
#             8192³ and the 1.3B GPT's GEMMs; attention fwd+bwd at 4K-32K tokens, d 64 and 128, causal
#             and full, 16 query heads with 16 or 4 kv heads (every SDPA backend, the fastest kept);
#             configs/gpt-1.3b.yaml trained at 8K and 32K (tokens/s, MFU, peak memory); DiT-XL/2 at 16K
#             patches; `wallfacer tune --calibrate` and its predicted steps; train.cuda_graph's step
#             beside the eager one (gpt2-124m, the 1.3B at 8K); the longest sequence that trains
#             (WF_SPEED_PARTS picks parts) -> $OUT/speed-table.md with PASS / MISS per target
#   documents (not in the default list either) issue 30's time target where each rank has a core of
#             its own, which the 2-core development machines lack: `wallfacer bench attention
#             --documents 8:mixed` at 16K tokens, 4 processes on the CPU, one thread each, bound to
#             cores: per strategy the packed batch's attention time against its work (<= 1.15)
#             beside the full causal mask, and the layout's work imbalance (< 5%)
# Exit status 0 only when no phase failed or erred. Everything printed is also in
# $OUT/device-check.log; $OUT/results.json holds the phase lines and every measured number.
#
# WF_DEVICE_CHECK_DRY=1 tests the script on a machine without a GPU: setup (unpacking, relocation,
# library discovery) runs as on the GPU machine, the GPU-only phases are skipped with a message,
# and the other phases run with the test device (testdev) in the GPU's place, toy model sizes,
# 3 steps and a CPU bench (WF_DEVICE_CHECK_DEVICE, _STEPS, _SMALL, _BUDGET_S override each).
# WF_DEVICE_CHECK_PHASES=tests,parity,sp4,layouts,spbench,bench (the default: all but speed and documents) runs a subset, e.g.
# a second call with the device time left after a first one ran out of its budget, or speed alone.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pack="${1:-device-pack}"
case "$pack" in /*) ;; *) pack="$root/$pack" ;; esac
dry="${WF_DEVICE_CHECK_DRY:-0}"
if [[ $dry == 1 ]]; then
  device="${WF_DEVICE_CHECK_DEVICE:-testdev}" bench_device=cpu
  budget="${WF_DEVICE_CHECK_BUDGET_S:-1800}" steps="${WF_DEVICE_CHECK_STEPS:-3}" small="${WF_DEVICE_CHECK_SMALL:-1}"
else
  device="${WF_DEVICE_CHECK_DEVICE:-cuda}" bench_device=cuda
  budget="${WF_DEVICE_CHECK_BUDGET_S:-345}" steps="${WF_DEVICE_CHECK_STEPS:-20}" small="${WF_DEVICE_CHECK_SMALL:-0}"
fi
# The speed phase alone fills one 10-minute device call of its own.
if [[ $dry != 1 && -z ${WF_DEVICE_CHECK_BUDGET_S:-} && ${WF_DEVICE_CHECK_PHASES:-} == speed ]]; then budget=540; fi
out="${OUT:-/tmp/wf-device-check-out}"
work="${WF_DEVICE_CHECK_WORK:-/tmp/wf-device-check}"  # the runs; WF_DEVICE_CHECK_WORK: two checks side by side
prefix="${WF_DEVICE_CHECK_PREFIX:-/tmp/wf-device-prefix}"  # the unpacked .debs and build
bin="$prefix/wf/bin"
reserve=8  # seconds kept for the table and the summary
cpu_threads=$(($(nproc) / 2))  # the CPU halves of the parity runs' (the rest: the GPU's runs and tests)
((cpu_threads > 0)) || cpu_threads=1
t0=$SECONDS

# ---- bookkeeping ---------------------------------------------------------------------------------
# wanted PHASE: whether WF_DEVICE_CHECK_PHASES (default: all) names it; setup and versions always run.
wanted() { [[ ",${WF_DEVICE_CHECK_PHASES:-tests,parity,sp4,layouts,spbench,bench}," == *",$1,"* ]]; }
left() { echo $((budget - (SECONDS - t0))); }
# limit WANT: WANT seconds, or what the budget still allows (0 when too little is left).
limit() {
  local l=$(($(left) - reserve))
  ((l < 5)) && { echo 0; return; }
  ((l < $1)) && echo "$l" || echo "$1"
}
result() {  # result STATUS PHASE DETAIL...
  local status="$1" phase="$2"; shift 2
  echo "$status $phase: $*"
  printf '%s\t%s\t%s\n' "$status" "$phase" "$*" >> "$work/results.tsv"
}
phase() { echo; echo "=== $1 ($(left) s of the $budget s budget left)"; }
# timed LIMIT CMD...: CMD under LIMIT seconds; 124 when it timed out, 125 when no time was left.
timed() {
  local lim="$1"; shift
  ((lim > 0)) || return 125
  timeout -k 5 "$lim" "$@"
}
ran_out() { (($1 == 124 || $1 == 125 || $1 == 137)); }  # ran_out RC: timed out, or no time to start
# why_failed RC LIMIT [LOG [LINES]]: the words for a non-zero exit, and the end of the run's output.
why_failed() {
  case "$1" in
    124 | 137) echo -n "timed out after $2 s" ;;
    125) echo -n "not run: no time left in the $budget s budget" ;;
    *) echo -n "exit status $1" ;;
  esac
  if [[ -s ${3:-} ]]; then echo "; its output ends: $(log_end "$3" "${4:-3}")"; else echo; fi
}
# log_end FILE [LINES]: the last lines of a run's output, on one line.
log_end() {
  tail -"${2:-3}" "$1" 2>/dev/null | tr '\n' ' ' | cut -c1-400
}
# The python3 that has torch (the GPU machine's image: its plain python3).
python_with_torch() {
  local p
  for p in "${WF_PYTHON:-}" python3 /usr/bin/python3; do
    [[ -n $p ]] && "$p" -c "import torch" 2>/dev/null && { echo "$p"; return 0; }
  done
  return 1
}

# .deb and .tar.xz extraction, with python3 where dpkg-deb or xz are missing (not Debian).
extract_deb() {
  if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$1" "$2"; return; fi
  python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"!<arch>\n", f"{sys.argv[1]} is not a .deb (an ar archive)"
pos = 8
while pos < len(data):  # ar members: a 60-byte header (name 16, size at 48..58), the body, padding to even
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
    body, pos = data[pos + 60:pos + 60 + size], pos + 60 + size + (size & 1)
    if name.startswith("data.tar"):
        kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2], **kw)
        break
else:
    sys.exit(f"no data.tar in {sys.argv[1]}")
PY
}
extract_tar_xz() {
  if command -v xz >/dev/null; then tar -xJf "$1" -C "$2"; return; fi
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$1" "$2"
}

# ---- setup -----------------------------------------------------------------------------------------
# Our binaries (and mpirun) run as "${wf[@]}" COMMAND: with the prefix's and the machine's CUDA
# libraries, which nothing else (python3, PyTorch) sees. With WF_DEVICE_CHECK_HIDE_SYSTEM=1 (a
# test of the pack on a Debian machine, as root) they run in a mount namespace of their own in
# which this machine's copies of every packed package's files read as empty, as on an image
# without them: a library missing from the pack, or a path not relocated, then fails the run.
set_wf() {
  wf=(env LD_LIBRARY_PATH="$WF_LD")
  [[ ${WF_DEVICE_CHECK_HIDE_SYSTEM:-0} == 1 ]] && wf+=(unshare -m --propagation private "$work/hide.sh")
}
hide_system_copies() {
  # The packages whose libraries our binaries load on this machine (ldd, dpkg -S), decided without
  # looking at the pack, so that a package the pack lacks shows; glibc, the C++ runtime and CUDA
  # stay (the GPU machine has its own), Open MPI's launcher and plugins and PMIx are added.
  local so path pkg real p
  {
    printf '%s\n' openmpi-bin openmpi-common libopenmpi3 libpmix2
    LD_LIBRARY_PATH="$prefix/wf/lib" ldd "$bin"/* "$prefix"/wf/lib/* | awk '/=> \//{print $1, $3}' | sort -u |
      while read -r so path; do
        [[ $so =~ ^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libwallfacer)\.so ]] && continue
        real="$(readlink -f "$path")"
        for p in "$path" "$real" "${real#/usr}"; do  # dpkg knows /lib or /usr/lib (Debian 12 merges them)
          dpkg -S "$p" 2>/dev/null | head -1 | cut -d: -f1 | grep . && break
        done
      done
  } | sort -u | grep . > "$work/hidden-packages.txt"
  while read -r pkg; do
    dpkg -L "$pkg" 2>/dev/null | grep -vE "^/usr/share/(doc|man)/" |
      while read -r path; do [[ -f $path && ! -L $path ]] && echo "$path"; done
  done < "$work/hidden-packages.txt" | sort -u > "$work/hidden.txt"
  cat > "$work/hide.sh" <<HIDE
#!/bin/bash
while read -r f; do mount --bind /dev/null "\$f" || exit 1; done < "$work/hidden.txt"
exec "\$@"
HIDE
  chmod +x "$work/hide.sh"
  echo "WF_DEVICE_CHECK_HIDE_SYSTEM=1: our binaries run with this machine's copies of these packages hidden" \
    "($(wc -l < "$work/hidden.txt") files): $(xargs < "$work/hidden-packages.txt")"
}
setup() {
  phase "setup: unpack $pack into $prefix, find the libraries"
  if [[ ! -f $pack/build.tar.xz ]]; then
    result ERROR setup "no $pack/build.tar.xz: run scripts/device-pack.sh on the CPU machine and carry its folder"
    return 1
  fi
  sed -n '1,4p' "$pack/MANIFEST.txt" 2>/dev/null
  local f d
  mkdir -p "$prefix/root" "$prefix/fallback" "$prefix/wf"
  for f in "$pack"/debs/*.deb; do
    extract_deb "$f" "$prefix/root" || { result ERROR setup "unpacking $f failed"; return 1; }
  done
  for f in "$pack"/debs/fallback/*.deb; do extract_deb "$f" "$prefix/fallback" || return 1; done
  extract_tar_xz "$pack/build.tar.xz" "$prefix/wf" || { result ERROR setup "unpacking build.tar.xz failed"; return 1; }
  [[ ${WF_DEVICE_CHECK_HIDE_SYSTEM:-0} == 1 ]] && hide_system_copies

  local dirs=("$prefix/wf/lib")
  for d in usr/lib/x86_64-linux-gnu lib/x86_64-linux-gnu usr/lib/x86_64-linux-gnu/openblas-pthread \
           usr/lib/x86_64-linux-gnu/pmix2/lib; do
    [[ -d $prefix/root/$d ]] && dirs+=("$prefix/root/$d")
  done
  # CUDA, cuBLAS, cuDNN, NCCL: the toolkit's, then the NVIDIA wheels under python3 (PyTorch's),
  # then the driver's folder.
  local cuda_dirs=()
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -d $d ]] && cuda_dirs+=("$d")
  done
  mapfile -t -O "${#cuda_dirs[@]}" cuda_dirs < <(python3 - <<'PY' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
seen = []
for r in roots:
    for lib in sorted(glob.glob(os.path.join(r, "nvidia", "**", "lib*.so*"), recursive=True)):
        d = os.path.dirname(os.path.realpath(lib))
        if d not in seen:
            seen.append(d)
print("\n".join(seen))
PY
  )
  mapfile -t cuda_dirs < <(printf '%s\n' "${cuda_dirs[@]}" | grep .)
  [[ -d /usr/local/nvidia/lib64 ]] && cuda_dirs+=(/usr/local/nvidia/lib64)
  echo "library folders for CUDA, cuBLAS, cuDNN, NCCL (in this order):"
  printf '  %s\n' "${cuda_dirs[@]}"
  WF_LD="$(IFS=:; echo "${dirs[*]}:${cuda_dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  set_wf

  # The image's libstdc++ / libgcc only if ours need newer versions than it has.
  local ldd_out
  ldd_out="$("${wf[@]}" ldd "$bin"/* "$prefix"/wf/lib/* 2>&1)"
  if grep -q "version .* not found" <<<"$ldd_out"; then
    echo "the image's C++ runtime is older than the build's: using the packed libstdc++/libgcc"
    WF_LD="$prefix/fallback/usr/lib/x86_64-linux-gnu:$prefix/fallback/lib/x86_64-linux-gnu:$WF_LD"
    set_wf
    ldd_out="$("${wf[@]}" ldd "$bin"/* "$prefix"/wf/lib/* 2>&1)"
  fi
  if grep -qE "not found" <<<"$ldd_out"; then
    grep -E "^/|not found" <<<"$ldd_out"
    result ERROR setup "libraries not found (above): the pack lacks a package, or the image lacks a CUDA library"
    return 1
  fi
  local started
  if ! started="$("${wf[@]}" "$bin/wallfacer" --version 2>&1)"; then
    result ERROR setup "our wallfacer does not start: $started"
    return 1
  fi
  echo "our binaries load (ldd):"
  grep -E "libcuda|libcudart|libcublas|libcudnn|libnccl|libmpi\.|libopenblas|libdnnl|libstdc" <<<"$ldd_out" |
    awk '{print $1, $3}' | sort -u | while read -r so path; do echo "  $so -> $(readlink -f "$path")"; done

  # Open MPI from the prefix: OPAL_PREFIX relocates its plugins, help and config files; PMIx
  # needs its own paths. Only the shared-memory transports are asked for: the image has none of
  # the fabric libraries (UCX, libfabric) that other plugins would load.
  local pmix="$prefix/root/usr/lib/x86_64-linux-gnu/pmix2"
  export OPAL_PREFIX="$prefix/root/usr" PMIX_INSTALL_PREFIX="$pmix" PMIX_DATADIR="$pmix/share"
  export PMIX_LIBDIR="$pmix/lib" PMIX_MCA_mca_base_component_path="$pmix/lib/pmix"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mca_base_component_show_load_errors=0
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_osc='^ucx' OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
  mpirun=("$prefix/root/usr/bin/orterun")  # local ranks inherit its environment
  local hosts system
  hosts="$(timed 30 "${wf[@]}" "${mpirun[@]}" -np 2 uname -n 2>&1)" ||
    { echo "$hosts"; result ERROR setup "the relocated mpirun -np 2 uname -n failed"; return 1; }
  # Which Open MPI mpirun loaded: its own memory map names the plugin files.
  # A rank's $PPID is mpirun; $0 is the folder to count: the rank's shell expands both.
  # shellcheck disable=SC2016
  local ours maps='grep -c " $0/x86_64-linux-gnu/openmpi/" /proc/$PPID/maps || true'
  system="$(timed 30 "${wf[@]}" "${mpirun[@]}" -np 1 bash -c "$maps" /usr/lib)"
  ours="$(timed 30 "${wf[@]}" "${mpirun[@]}" -np 1 bash -c "$maps" "$prefix/root/usr/lib")"
  if [[ ${system:-0} != 0 || ${ours:-0} == 0 ]]; then
    result ERROR setup "mpirun mapped ${system:-?} files of a system Open MPI and ${ours:-0} of the prefix's:" \
      "not relocated"
    return 1
  fi
  wrapper "$work/bin/wallfacer" "${wf[@]}" "$bin/wallfacer"  # for the parity script
  wrapper "$work/bin/wallfacer-np2" "${wf[@]}" "${mpirun[@]}" -np 2 "$bin/wallfacer"
  wrapper "$work/bin/wallfacer-np4" "${wf[@]}" "${mpirun[@]}" -np 4 "$bin/wallfacer"
  result PASS setup "unpacked $(find "$pack/debs" -name "*.deb" | wc -l) packages;" \
    "mpirun -np 2 uname -n ($(echo "$hosts" | sort -u | xargs)) ran Open MPI from $OPAL_PREFIX" \
    "($ours plugin files mapped, none of a system one)"
}

# ---- versions ----------------------------------------------------------------------------------
versions() {
  phase "versions"
  if [[ $dry != 1 ]]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>&1 |
      tee "$work/nvidia-smi.csv"
  else
    echo "dry run: no nvidia-smi"
  fi
  if ! "${wf[@]}" "$bin/wallfacer" info 2>&1 | tee "$work/info.txt"; then
    result ERROR versions "wallfacer info failed (above)"
    return 1
  fi
  "${wf[@]}" "$bin/wallfacer" info --json > "$work/info.json" 2>/dev/null
  # The libraries' versions, asked of the libraries our binaries load (their file names often carry none).
  LD_LIBRARY_PATH="$WF_LD" python3 - "$WF_LD" <<'PY' | tee "$work/libraries.txt"
import ctypes, os, sys
dirs = [d for d in sys.argv[1].split(":") if d]
def ask(name, soname, call):
    path = next((os.path.realpath(os.path.join(d, soname)) for d in dirs
                 if os.path.exists(os.path.join(d, soname))), None)
    if path is None:
        return print(f"{name}: not found ({soname})")
    try:
        print(f"{name}: {call(ctypes.CDLL(path))} ({path})")
    except (OSError, AttributeError) as e:
        print(f"{name}: unknown ({path}: {e})")
def int_out(fn):
    v = ctypes.c_int()
    fn(ctypes.byref(v))
    return v.value
def size_t(fn):
    fn.restype = ctypes.c_size_t
    return fn()
dotted = lambda v: f"{v // 10000}.{v % 10000 // 100}.{v % 100}"  # major·10000 + minor·100 + patch
runtime = lambda v: f"{v // 1000}.{v % 1000 // 10}"  # major·1000 + minor·10
ask("CUDA runtime", "libcudart.so.13", lambda l: runtime(int_out(l.cudaRuntimeGetVersion)))
ask("cuBLASLt", "libcublasLt.so.13", lambda l: dotted(size_t(l.cublasLtGetVersion)))
ask("cuDNN", "libcudnn.so.9", lambda l: dotted(size_t(l.cudnnGetVersion)))
ask("NCCL", "libnccl.so.2", lambda l: dotted(int_out(l.ncclGetVersion)))
PY
  if [[ $dry != 1 ]] && ! probe="$("${wf[@]}" "$bin/wf_gpu_probe" 2>&1)"; then
    result ERROR versions "wf_gpu_probe sees no GPU: $probe"
    return 1
  fi
  result PASS versions "${probe:-dry run: no GPU}"
}

# ---- tests -------------------------------------------------------------------------------------
tests() {
  phase "tests: every CUDA test"
  if [[ $dry == 1 ]]; then
    local cases
    cases="$("${wf[@]}" "$bin/test_cuda" --list-test-names-only 2>/dev/null | grep -c .)"
    result SKIP tests "dry run: $cases test_cuda cases listed, none run without a GPU"
    return 0
  fi
  local lim rc summary
  # The sm_90 kernels and the CUDA graphs (never run on a GPU before) in processes of their own,
  # the kernels with their switch on, so that a fault (a sticky CUDA error ends its process) costs
  # only their own line.
  local name filter sm90
  for name in test_cuda test_cuda_sm90 test_cuda_graph; do
    case $name in
      test_cuda) filter="~[sm90]~[graph]" sm90=0 lim=$(limit 90) ;;
      test_cuda_sm90) filter="[sm90]" sm90=1 lim=$(limit 40) ;;
      *) filter="[graph]" sm90=0 lim=$(limit 30) ;;
    esac
    # On the cores the CPU runs of the parity phase leave.
    WF_ATTENTION_SM90=$sm90 OMP_NUM_THREADS=$(($(nproc) - cpu_threads)) timed "$lim" "${wf[@]}" "$bin/test_cuda" \
      --use-colour no --durations yes "$filter" 2>&1 | tee "$work/$name.log" | grep -vE "^[0-9.]+ s: "
    rc=${PIPESTATUS[0]}
    summary="$(grep -E "^(All tests passed|test cases:)" "$work/$name.log" | tail -1)"
    if ((rc == 0)); then result PASS "$name" "$filter: $summary"
    elif ran_out "$rc"; then
      local last
      last="$(grep -E "^[0-9.]+ s: " "$work/$name.log" | tail -1)"
      result ERROR "$name" "$(why_failed "$rc" "$lim")${last:+; the last case that finished: $last}"
    else result FAIL "$name" "$filter: ${summary:-exit status $rc}"
    fi
  done
  if [[ -x $bin/test_dist ]]; then
    lim=$(limit 45)
    OMP_NUM_THREADS=2 timed "$lim" "${wf[@]}" "${mpirun[@]}" -np 2 "$bin/test_dist" --use-colour no "[cuda]" 2>&1 |
      tee "$work/test_dist.log"
    rc=${PIPESTATUS[0]}
    summary="$(grep -E "^(All tests passed|test cases:)" "$work/test_dist.log" | tail -1)"
    if ((rc == 0)); then result PASS test_dist "2 ranks, [cuda]: $summary"
    elif ran_out "$rc"; then result ERROR test_dist "$(why_failed "$rc" "$lim")"
    else result FAIL test_dist "2 ranks, [cuda]: ${summary:-exit status $rc}"
    fi
  fi
}

# ---- training runs -------------------------------------------------------------------------------
# The parity and sp4 phases train through tests/train/device_parity_tolerance.sh (the one
# implementation of a device's 20-step runs beside the CPU's, which the train_device_parity_cuda_*
# tests run too; its header says how), given an executable that runs our wallfacer with the
# prefix's libraries (and one that runs it as 4 ranks), the check's device, steps and sizes, and a
# deadline that keeps every run inside the budget. Its runs land in $work/parity (and $work/sp4),
# one folder per run: MODEL.DTYPE.SIDE.
parity_script="$root/tests/train/device_parity_tolerance.sh"
# wrapper FILE CMD...: an executable FILE that runs CMD followed by its own arguments.
wrapper() {
  local file="$1"; shift
  mkdir -p "$(dirname "$file")"
  printf '#!/usr/bin/env bash\nexec %s"$@"\n' "$(printf '%q ' "$@")" > "$file"
  chmod +x "$file"
}
# parity_runs MODELS EXE WORK_DIR: the parity script with the check's settings (more in the caller's
# WF_DEVICE_PARITY_* variables); its deadline: the budget's end, less the reserve.
parity_runs() {
  WF_DEVICE_PARITY_DEVICE="$device" WF_DEVICE_PARITY_STEPS="$steps" WF_DEVICE_PARITY_SMALL="$small" \
    WF_DEVICE_PARITY_DEADLINE=$(($(date +%s) + $(left) - reserve)) WF_FASHION_MNIST_DIR="$pack/data" \
    "$parity_script" "$@"
}
# The CPU halves, in the background from the start, on half the cores (the GPU's runs, the CUDA tests
# and the bench take the rest); their lines in $work/parity-cpu.log.
cpu_halves() {
  OMP_NUM_THREADS="$cpu_threads" WF_DEVICE_PARITY_TRAIN=cpu WF_DEVICE_PARITY_TIMEOUT=120 \
    parity_runs all "$work/bin/wallfacer" "$work/parity" > "$work/parity-cpu.log" 2>&1
}
# Stops the CPU halves: every process under the background shell, parents first (no next run
# starts; timeout passes the signal on to wallfacer).
stop_cpu_halves() {
  local tree=("$cpu_pid") i=0 kid
  while ((i < ${#tree[@]})); do
    for kid in $(pgrep -P "${tree[i]}"); do tree+=("$kid"); done
    i=$((i + 1))
  done
  kill "${tree[@]}" 2>/dev/null
  wait "$cpu_pid" 2>/dev/null
}

parity() {
  phase "parity: $steps steps on $device beside the CPU (GPT-tiny, LLaMA-tiny, DiT-fashion; f32, bf16)"
  # On the cores the CPU halves leave.
  OMP_NUM_THREADS=$(($(nproc) - cpu_threads)) WF_DEVICE_PARITY_TRAIN=device WF_DEVICE_PARITY_TIMEOUT=45 \
    parity_runs all "$work/bin/wallfacer" "$work/parity"
  if [[ -n ${cpu_pid:-} ]]; then
    echo "waiting for the CPU runs"
    wait "$cpu_pid"
  else  # main did not start them (the phase tried by hand)
    cpu_halves
  fi
  cat "$work/parity-cpu.log"
  # One line per model: PASS|FAIL|ERROR MODEL (...): DTYPE: detail; ...
  local status model detail compared=0
  while read -r status model detail; do
    case "$status" in
      PASS | FAIL | ERROR) result "$status" "parity $model" "$detail"; compared=$((compared + 1)) ;;
      *) echo "$status $model $detail" ;;
    esac
  done < <(WF_DEVICE_PARITY_TRAIN=none parity_runs all "$work/bin/wallfacer" "$work/parity" 2>&1)
  ((compared > 0)) || result ERROR parity "$parity_script compared nothing (its output is above)"
}

# one_process_llama: the parity phase's one-process LLaMA f32 run on the device (run here when that
# phase did not run); true when it finished, the runs of sp4 and layouts compare with it.
one_process_llama() {
  local one="$work/parity/llama.f32.$device"
  if [[ ! -f $one/rc ]]; then
    echo "1 process: $(WF_DEVICE_PARITY_TIMEOUT=45 sp4_llama_f32 "$work/bin/wallfacer" "$work/parity" 2>&1)"
  fi
  [[ "$(cut -d' ' -f1 "$one/rc" 2>/dev/null)" == 0 ]]
}

# layout_run PHASE NAME NP TIMEOUT SETTINGS: LLaMA-tiny f32 as NP processes sharing the one device
# (device tensors cross ranks through MPI staging: NCCL refuses two ranks on one GPU) with the
# --set SETTINGS, its losses within 1e-4 of the one-process run's (compare_losses.py).
layout_run() {
  local name="$1" label="$2" np="$3" lim="$4" settings="$5" ran detail
  local one="$work/parity/llama.f32.$device" many="$work/layouts/$label/llama.f32.$device"
  ran="$(OMP_NUM_THREADS=2 WF_DEVICE_PARITY_TIMEOUT="$lim" WF_DEVICE_PARITY_SET="$settings" \
    sp4_llama_f32 "$work/bin/wallfacer-np$np" "$work/layouts/$label" 2>&1)"
  echo "$label, $np processes: $ran"
  if [[ "$(cut -d' ' -f1 "$many/rc" 2>/dev/null)" != 0 ]]; then
    result ERROR "$name" "$label, $np processes: ${ran:-no run}"
  elif detail="$(python3 "$root/tests/train/compare_losses.py" "$many/metrics.jsonl" "$one/metrics.jsonl" 1e-4 \
                 "$steps" --labels "$np processes" "1 process")"; then
    result PASS "$name" "$label, $np processes vs 1 on $device: $detail"
  else
    result FAIL "$name" "$label, $np processes vs 1 on $device: $detail"
  fi
}

sp4() {
  phase "sp4: LLaMA-tiny as sp 4 WallFacer C 2, 4 processes on one $device, beside one process"
  if ! one_process_llama; then
    result ERROR sp4 "the one-process $device run (parity llama f32) did not finish: nothing to compare with"
    return
  fi
  layout_run sp4 "sp 4 wallfacer C 2" 4 60 "--set parallel.sp=4 --set parallel.C=2 --set parallel.sp_strategy=wallfacer"
}

# Every sp strategy and sp paired with each other dimension (issue 29's device check), as 2 or 4
# processes sharing the device, each against the one-process run; in order of importance, each cut
# to the budget.
layouts() {
  phase "layouts: each sp strategy, tp x sp, pp x sp, dp x sp with ZeRO-2, processes sharing one $device"
  if ! one_process_llama; then
    result ERROR layouts "the one-process $device run (parity llama f32) did not finish: nothing to compare with"
    return
  fi
  local sp="--set parallel.sp"
  local cases=(
    "ring sp 2|2|$sp=2 --set parallel.sp_strategy=ring"
    "ulysses sp 2|2|$sp=2 --set parallel.sp_strategy=ulysses"
    "wallfacer sp 2 C 1|2|$sp=2 --set parallel.sp_strategy=wallfacer"
    "ulysses-wallfacer sp 4 U 2|4|$sp=4 --set parallel.sp_strategy=ulysses-wallfacer --set parallel.U=2"
    "tp 2 x sp 2|4|--set parallel.tp=2 $sp=2 --set parallel.sp_strategy=wallfacer"
    "pp 2 x sp 2|4|--set parallel.pp=2 $sp=2 --set parallel.sp_strategy=ring"
    "dp 2 x sp 2 zero-2|4|--set parallel.dp=2 $sp=2 --set parallel.zero=2 --set parallel.sp_strategy=wallfacer")
  local c label np settings
  for c in "${cases[@]}"; do
    IFS='|' read -r label np settings <<<"$c"
    if [[ $small == 1 && $label == pp* ]]; then
      result SKIP layouts "$label: the small models have one layer, which two stages cannot split"
      continue
    fi
    if (($(left) < reserve + 20)); then
      result ERROR layouts "$label: no time left in the budget"
      continue
    fi
    layout_run layouts "$label" "$np" 40 "$settings"
  done
}
# sp4_llama_f32 EXE WORK_DIR: the parity script's LLaMA f32 run on the device alone.
sp4_llama_f32() {
  WF_DEVICE_PARITY_TRAIN=device WF_DEVICE_PARITY_DTYPES=f32 parity_runs llama "$@"
}

# Sequence-parallel attention per strategy on the device (`wallfacer bench attention`), 4 processes
# sharing it (staged: NCCL refuses two ranks on one GPU), causal, 16K tokens, d 128, f32: time,
# compute-only and communication-only time and their overlap, bytes against the formulas (--check).
spbench() {
  phase "spbench: sp attention per strategy on $device, 4 processes, with its overlap"
  local lim rc sizes=(--seq 16384 --heads 8 --head-dim 128 --iters 2)
  [[ $small == 1 ]] && sizes=(--seq 64 --heads 4 --head-dim 8 --iters 1)
  lim=$(limit 90)
  timed "$lim" "$work/bin/wallfacer-np4" bench attention --device "$device" --transport staged --mask causal \
    "${sizes[@]}" --check --json > "$work/spbench.jsonl" 2> "$work/spbench.err"
  rc=$?
  cat "$work/spbench.jsonl"
  if ((rc == 0)); then
    result PASS spbench "$(spbench_summary "$work/spbench.jsonl")"
  elif ran_out "$rc"; then result ERROR spbench "$(why_failed "$rc" "$lim")"
  else result FAIL spbench "exit status $rc: $(tail -3 "$work/spbench.err" | tr '\n' ' ')"
  fi
}

# spbench_summary JSONL: one clause per row of bench attention's JSON lines.
spbench_summary() {
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
print("; ".join("{} C {}: {:.1f} ms, compute {:.1f}, comm {:.1f}, hidden {:.2f}".format(
    r["strategy"], r["C"], r["time_ms"], r["compute_only_ms"], r["comm_only_ms"], r["overlap"])
    for r in rows if "time_ms" in r))
PY
}

# ---- documents ---------------------------------------------------------------------------------
# Issue 30's P = 4 target (docs/sequence-parallelism.md §13) on this machine's CPU cores: the
# packed batch beside the full causal mask, per strategy, 4 ranks of one thread each, each bound to
# a core (the development machines run 4 ranks on 2 cores, where the ratio moves by ±0.15 between
# iterations). FAIL names the rows over a target: a measured miss, reported as such.
documents() {
  phase "documents: packed attention time against its work, 4 ranks on CPU cores of their own"
  local lim rc sizes=(--seq 16384 --documents 8:mixed --iters 5)
  [[ $small == 1 ]] && sizes=(--seq 512 --documents 4:mixed --heads 2 --head-dim 16 --iters 2)
  lim=$(limit 300)
  OMP_NUM_THREADS=1 OMPI_MCA_hwloc_base_binding_policy=core timed "$lim" "$work/bin/wallfacer-np4" bench attention \
    --device cpu --mask causal "${sizes[@]}" --json > "$work/documents.jsonl" 2> "$work/documents.err"
  rc=$?
  cat "$work/documents.jsonl"
  if ((rc != 0)); then
    if ran_out "$rc"; then result ERROR documents "$(why_failed "$rc" "$lim")"
    else result FAIL documents "exit status $rc: $(tail -3 "$work/documents.err" | tr '\n' ' ')"
    fi
    return
  fi
  local verdict
  verdict="$(python3 - "$work/documents.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{") and "compute_per_work" in line]
missed = [r for r in rows if r["compute_per_work"] > 1.15 or r["imbalance_balanced"] >= 0.05]
print("PASS" if rows and not missed else "FAIL", "; ".join(
    "{} C {}: time / work {:.2f} (iterations {:.2f}..{:.2f}), imbalance {:.1%} (token zigzag {:.1%})".format(
        r["strategy"], r["C"], r["compute_per_work"], r["compute_per_work_iterations_min"],
        r["compute_per_work_iterations_max"], r["imbalance_balanced"], r["imbalance_token_zigzag"])
    for r in rows) or "no rows")
PY
)"
  if [[ $dry == 1 ]]; then  # toy sizes: the command and its rows are checked, not the targets
    result PASS documents "dry run, toy sizes, targets not judged: ${verdict#* }"
  else
    result "${verdict%% *}" documents "${verdict#* } (targets: time / work <= 1.15, imbalance < 5%)"
  fi
}

# ---- bench -------------------------------------------------------------------------------------
one=(--set parallel.dp=1 --set parallel.tp=1 --set parallel.pp=1 --set parallel.sp=1 --set parallel.C=1)
# train NAME DEVICE DTYPE LIMIT SETTINGS...: one `wallfacer train` in one process; its output in
# $work/runs/NAME.out, its metrics in $work/runs/NAME/metrics.jsonl.
train() {
  local name="$1" dev="$2" dtype="$3" lim="$4"; shift 4
  local dir="$work/runs/$name"
  mkdir -p "$dir"
  timed "$lim" "${wf[@]}" "$bin/wallfacer" train "$@" --set train.device="$dev" --set train.dtype="$dtype" \
    --set log.dir="$dir" --set checkpoint.dir="$dir/checkpoints" > "$dir.out" 2>&1
}
# step_row METRICS WARM KEY=VALUE...: one JSON line of a training run's steps after the first WARM:
# the median step (ms_per_step), tokens/s (when batch and seq are given), the largest peak_mem_bytes,
# and the KEY=VALUE pairs (numbers as numbers).
step_row() {
  python3 - "$@" <<'PY'
import json, statistics, sys
path, warm = sys.argv[1:3]
row = {}
for pair in sys.argv[3:]:
    key, _, value = pair.partition("=")
    row[key] = int(value) if value.lstrip("-").isdigit() else value
logged = [r for r in map(json.loads, open(path)) if "step_s" in r]
median = statistics.median_high([r["step_s"] for r in logged if r["step"] > int(warm)])
row.update(ms_per_step=median * 1e3, steps=sum(r["step"] > int(warm) for r in logged))
if "batch" in row and "seq" in row:
    row["tokens_per_s"] = row["batch"] * row["seq"] / median
row["peak_mem_bytes"] = max((r.get("peak_mem_bytes") or 0 for r in logged), default=0)
print(json.dumps(row))
PY
}
bench() {
  phase "bench: $bench_device, wallfacer beside PyTorch"
  local b="$work/bench" lim rc py
  mkdir -p "$b"
  # name config layers d_model heads vocab batch seq dtype: the same model on both sides.
  local specs=("gpt-tiny configs/gpt-tiny.yaml 4 256 4 256 4 256 f32"
               "gpt2-124m configs/gpt2-124m.yaml 12 768 12 50304 8 1024 bf16")
  local gemm=8192 attention="1,8192,16,128" warm=3 timed_steps=10
  if [[ $small == 1 ]]; then
    specs=("gpt-tiny configs/gpt-tiny.yaml 1 32 2 256 1 32 f32" "gpt2-124m configs/gpt2-124m.yaml 1 64 2 512 1 32 bf16")
    gemm=64 attention="1,64,2,16" warm=1 timed_steps=2
  fi
  local B N H d
  IFS=, read -r B N H d <<<"$attention"
  lim=$(limit 45)
  timed "$lim" "${wf[@]}" "$bin/wallfacer" bench device --device "$bench_device" --json --size "$gemm" --batch "$B" \
    --tokens "$N" --heads "$H" --head-dim "$d" > "$b/wallfacer.jsonl"
  rc=$?
  cat "$b/wallfacer.jsonl"
  if ((rc == 0)); then result PASS "bench wallfacer" "GEMM and attention measured, results checked"
  elif ran_out "$rc"; then result ERROR "bench wallfacer" "$(why_failed "$rc" "$lim")"
  else result FAIL "bench wallfacer" "$(why_failed "$rc" "$lim")"
  fi

  local spec name config layers dm heads vocab batch seq dtype gpt_args=()
  for spec in "${specs[@]}"; do
    read -r name config layers dm heads vocab batch seq dtype <<<"$spec"
    gpt_args+=(--gpt "$name,$layers,$dm,$heads,$vocab,$batch,$seq,$dtype")
    lim=$(limit 60)
    train "$name.steps" "$bench_device" "$dtype" "$lim" "$root/$config" "${one[@]}" --set data.source=synthetic \
      --set model.n_layer="$layers" --set model.d_model="$dm" --set model.d_ff=$((4 * dm)) --set model.n_head="$heads" \
      --set model.n_kv_head="$heads" --set model.vocab_size="$vocab" --set model.max_seq_len="$seq" \
      --set train.seq_len="$seq" --set train.micro_batch_size="$batch" --set train.global_batch_size="$batch" \
      --set train.steps=$((warm + timed_steps)) --set train.warmup_steps=1 --set train.log_every=1 \
      --set train.eval_every=0 --set checkpoint.every=0
    rc=$?
    if ((rc == 0)); then
      step_row "$work/runs/$name.steps/metrics.jsonl" "$warm" bench=gpt model="$name" dtype="$dtype" batch="$batch" \
        seq="$seq" >> "$b/wallfacer.jsonl"
      result PASS "bench wallfacer $name" "$(tail -1 "$b/wallfacer.jsonl")"
    else
      result ERROR "bench wallfacer $name" "$(why_failed "$rc" "$lim" "$work/runs/$name.steps.out")"
    fi
  done

  if ! py="$(python_with_torch)"; then
    result ERROR "bench pytorch" "no python3 with torch here (WF_PYTHON names one)"
    return
  fi
  lim=$(limit 90)
  PYTHONUNBUFFERED=1 timed "$lim" "$py" "$root/scripts/bench_torch_gpu.py" --device "$bench_device" --gemm "$gemm" \
    --attention "$B,$N,$H,$d" "${gpt_args[@]}" --gpt-warmup "$warm" --gpt-steps "$timed_steps" > "$b/pytorch.jsonl"
  rc=$?
  cat "$b/pytorch.jsonl"
  if ((rc == 0)); then result PASS "bench pytorch" "$(head -1 "$b/pytorch.jsonl")"
  else result ERROR "bench pytorch" "$(why_failed "$rc" "$lim")"
  fi
}

# ---- speed (issue 31) ----------------------------------------------------------------------------
# The targets of issue 31, wallfacer beside PyTorch in the same run (docs/gpu.md, "GPU speed (issue 31):
# how to measure"); the table is device_check_tables.py's speed_table, in $OUT/speed-table.md.
# WF_SPEED_PARTS (default attention,gpt,dit,tune,graph,longest) picks parts, e.g. a second call for what the
# first one's budget did not reach; attention includes the GEMMs.
speed_part() { [[ ",${WF_SPEED_PARTS:-attention,gpt,dit,tune,graph,longest}," == *",$1,"* ]]; }

# measured_run ROWS WARM ROW_KEYS LIMIT DTYPE NAME TRAIN_ARGS...: `train` NAME on $bench_device, then
# its step_row (ROW_KEYS: "key=value ..." of the row, and `failure` when the run's train.cuda_graph
# capture failed) appended to ROWS; a result line either way.
# The speed runs save no checkpoint (checkpoint.every -1): the 1.3B's would be 16 GB to write each.
measured_run() {
  local rows="$1" warm="$2" keys="$3" lim="$4" dtype="$5" name="$6" rc failure
  shift 6
  train "$name" "$bench_device" "$dtype" "$lim" "$@"
  rc=$?
  if ((rc == 0)); then
    # A run with train.cuda_graph whose capture failed trained without the graph: its row says why.
    failure="$(grep -o 'could not be captured.*' "$work/runs/$name.out" | head -1 | cut -c1-200)"
    # shellcheck disable=SC2086 # the keys are words
    step_row "$work/runs/$name/metrics.jsonl" "$warm" $keys ${failure:+"failure=$failure"} >> "$rows"
    result PASS "speed wallfacer $name" "$(tail -1 "$rows")"
  else
    result ERROR "speed wallfacer $name" "$(why_failed "$rc" "$lim" "$work/runs/$name.out")"
  fi
  return "$rc"
}

# torch_rows ROWS LIMIT WHAT ARGS...: scripts/bench_torch_gpu.py ARGS appended to ROWS (its versions
# line first), a result line.
torch_rows() {
  local rows="$1" lim="$2" what="$3" py rc
  shift 3
  if ! py="$(python_with_torch)"; then
    result ERROR "speed pytorch $what" "no python3 with torch here (WF_PYTHON names one)"
    return
  fi
  PYTHONUNBUFFERED=1 timed "$lim" "$py" "$root/scripts/bench_torch_gpu.py" --device "$bench_device" "$@" \
    > "$rows.part" 2> "$rows.$what.err"
  rc=$?
  cat "$rows.part"
  if [[ ! -s $rows ]]; then cat "$rows.part" >> "$rows"; else grep -v '"bench": "versions"' "$rows.part" >> "$rows"; fi
  if ((rc == 0)); then result PASS "speed pytorch $what" "$(($(grep -c . "$rows.part") - 1)) measurements"
  else result ERROR "speed pytorch $what" "$(why_failed "$rc" "$lim" "$rows.$what.err")"
  fi
}

# tune_predicts ROWS MODEL CONFIG SETTINGS...: tune's predicted step of one measured run (the layout of
# one process with the run's checkpoint_attention) on the calibrated cluster, a row of ROWS.
tune_predicts() {
  local rows="$1" model="$2" config="$3" lim
  shift 3
  lim=$(limit 30)
  timed "$lim" "${wf[@]}" "$bin/wallfacer" tune --model "$config" --cluster "$work/speed/calibration.yaml" --world 1 \
    --json "$@" 2> "$work/speed/tune.$model.err" | python3 -c '
import json, sys
model, want = sys.argv[1], sys.argv[2] == "true"
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
rows = [r for r in rows if "step_s" in r] 
row = next((r for r in rows if r["checkpoint_attention"] == want), rows[0] if rows else None)
if row is None:
    sys.exit("tune predicted no layout")
print(json.dumps({"bench": "tune", "model": model, "kind": sys.argv[3], "step_s": row["step_s"],
                  "layout": row["layout"], "checkpoint_attention": row["checkpoint_attention"]}))' \
    "$model" "$(grep -q "checkpoint_attention=true" <<<"$*" && echo true || echo false)" \
    "$([[ $model == dit* ]] && echo dit || echo gpt)" >> "$rows" ||
    result ERROR "speed tune $model" "no prediction: $(log_end "$work/speed/tune.$model.err")"
}

speed() {
  phase "speed: issue 31's targets on $bench_device, wallfacer beside PyTorch"
  local s="$work/speed" lim rc
  mkdir -p "$s"
  local ours="$s/wallfacer.jsonl" theirs="$s/pytorch.jsonl"
  : > "$ours"
  : > "$theirs"
  # The GPT of about 1.3B (configs/gpt-1.3b.yaml): layers d_model heads vocab; its sequences; the
  # checkpoint at attention outputs from this length on; DiT-XL/2 at 16K patches (ours: 16 frames of
  # 32 x 32 patches, configs/dit-xl-2-video.yaml; PyTorch's reference has no frames: one 256 x 256
  # latent of 128 x 128 patches, the same work). The attention sweep: lengths x head dims x masks x
  # kv heads (0: as many as the 16 query heads).
  local L=24 D=2048 H=16 V=50304 seqs=(8192 32768) ckpt_from="${WF_SPEED_CHECKPOINT_FROM:-32768}"
  local gemm=8192 tokens=4096,8192,16384,32768 dims=64,128 kv=0,4 masks=causal,full warm=1 iters=3
  local steps_warm=2 steps_timed=3 dit_layers=28 dit_dim=1152 dit_heads=16 frames=16 image=64 torch_image=256
  local longest_max="${WF_SPEED_LONGEST_MAX:-1048576}"
  if [[ $small == 1 ]]; then
    L=1 D=32 H=4 V=256 seqs=(64 128) ckpt_from="${WF_SPEED_CHECKPOINT_FROM:-128}"
    gemm=64 tokens=32,64 dims=8,16 kv=0,2 warm=1 iters=1 steps_warm=1 steps_timed=2
    dit_layers=1 dit_dim=64 dit_heads=2 frames=1 image=8 torch_image=8 longest_max="${WF_SPEED_LONGEST_MAX:-512}"
  fi
  local small_gpt=() small_dit=()
  [[ $small == 1 ]] && small_gpt=(--set "model.n_layer=$L" --set "model.d_model=$D" --set "model.d_ff=$((4 * D))"
                                  --set "model.n_head=$H" --set "model.n_kv_head=$H" --set "model.vocab_size=$V")
  [[ $small == 1 ]] && small_dit=(--set "model.n_layer=$dit_layers" --set "model.d_model=$dit_dim"
                                  --set "model.n_head=$dit_heads" --set "model.frames=$frames"
                                  --set "model.image_size=$image")
  # Target 2: the 1.3B's GEMMs at micro batch 1 x the first sequence (M rows), forward shapes.
  local M=${seqs[0]}
  export WF_SPEED_GEMM_NAMES="qkv:${M}x$((3 * D))x$D attention-out:${M}x${D}x$D mlp-up:${M}x$((4 * D))x$D
mlp-down:${M}x${D}x$((4 * D)) lm-head:${M}x${V}x$D"
  local shapes=("${gemm}x${gemm}x${gemm}") name
  for name in $WF_SPEED_GEMM_NAMES; do shapes+=("${name#*:}"); done

  if speed_part attention; then
    lim=$(limit 150)
    # The sm_90 kernels are candidates of the choice here (WF_SPEED_SM90=0 leaves them out): each row's
    # forward_by / backward_by says what ran. A process of its own: a fault ends only this part.
    WF_ATTENTION_SM90="${WF_SPEED_SM90:-1}" timed "$lim" "${wf[@]}" "$bin/wallfacer" bench device \
      --device "$bench_device" --json \
      "${shapes[@]/#/--shape=}" --batch 1 --heads "$H" --tokens "$tokens" --head-dim "$dims" --kv-heads "$kv" \
      --mask "$masks" --warmup "$warm" --iters "$iters" >> "$ours" 2> "$s/bench-device.err"
    rc=$?
    if ((rc == 0)); then result PASS "speed wallfacer attention" "$(grep -c . "$ours") GEMMs and attentions, checked"
    elif ran_out "$rc"; then
      result ERROR "speed wallfacer attention" "$(why_failed "$rc" "$lim") ($(grep -c . "$ours") done)"
    else result FAIL "speed wallfacer attention" "$(why_failed "$rc" "$lim" "$s/bench-device.err")"
    fi
    local cases=() t d k m
    for m in ${masks//,/ }; do for d in ${dims//,/ }; do for k in ${kv//,/ }; do for t in ${tokens//,/ }; do
      cases+=(--attention "1,$t,$H,$d,$k,$m")
    done; done; done; done
    torch_rows "$theirs" "$(limit 150)" attention "${shapes[@]/#/--gemm-shape=}" "${cases[@]}" --sdpa-backends \
      --warmup "$warm" --iters "$iters"
  fi

  local T ckpt settings gpt_specs=() runs=()
  if speed_part gpt; then
    for T in "${seqs[@]}"; do
      ckpt=false
      ((T >= ckpt_from)) && ckpt=true
      settings="--set train.seq_len=$T --set model.max_seq_len=$T --set model.checkpoint_attention=$ckpt"
      settings+=" ${small_gpt[*]}"
      # shellcheck disable=SC2086 # settings are words
      measured_run "$ours" "$steps_warm" "bench=gpt model=gpt-1.3b.T$T dtype=bf16 batch=1 seq=$T layers=$L \
d_model=$D vocab=$V checkpoint=$([[ $ckpt == true ]] && echo attention-outputs || echo none)" "$(limit 150)" bf16 \
        "gpt-1.3b.T$T" "$root/configs/gpt-1.3b.yaml" "${one[@]}" $settings --set train.micro_batch_size=1 \
        --set train.global_batch_size=1 --set train.steps=$((steps_warm + steps_timed)) --set train.warmup_steps=1 \
        --set train.log_every=1 --set train.eval_every=0 --set checkpoint.every=-1 &&
        runs+=("gpt-1.3b.T$T|$root/configs/gpt-1.3b.yaml|$settings")
      gpt_specs+=(--gpt "gpt-1.3b.T$T,$L,$D,$H,$V,1,$T,bf16,rope")
    done
    torch_rows "$theirs" "$(limit 240)" gpt "${gpt_specs[@]}" --gpt-warmup "$steps_warm" --gpt-steps "$steps_timed"
  fi

  if speed_part dit; then
    local dit_tokens=$((frames * (image / 2) * (image / 2)))
    # shellcheck disable=SC2086
    measured_run "$ours" "$steps_warm" "bench=dit model=dit-xl-2 dtype=bf16 batch=1 tokens=$dit_tokens" \
      "$(limit 120)" bf16 dit-xl-2 "$root/configs/dit-xl-2-video.yaml" "${one[@]}" "${small_dit[@]}" \
      --set train.seq_len=$dit_tokens --set train.micro_batch_size=1 --set train.global_batch_size=1 \
      --set train.steps=$((steps_warm + steps_timed)) --set train.log_every=1 --set checkpoint.every=-1 &&
      runs+=("dit-xl-2|$root/configs/dit-xl-2-video.yaml|${small_dit[*]} --set train.seq_len=$dit_tokens")
    torch_rows "$theirs" "$(limit 150)" dit --dit "dit-xl-2,$dit_layers,$dit_dim,$dit_heads,$torch_image,2,1,bf16" \
      --gpt-warmup "$steps_warm" --gpt-steps "$steps_timed"
  fi

  if speed_part tune; then
    # One process measures the device (--device where this build's tune has it; else the host's CPU,
    # and the predictions say so by missing), then tune predicts each measured run.
    local device_flag=()
    grep -q -- "--device" <<<"$("${wf[@]}" "$bin/wallfacer" tune --help 2>/dev/null)" &&
      device_flag=(--device "$bench_device")
    lim=$(limit 60)
    timed "$lim" "${wf[@]}" "$bin/wallfacer" tune --calibrate "${device_flag[@]}" --out "$s/calibration.yaml" \
      --calibrate-seconds "$([[ $small == 1 ]] && echo 0.01 || echo 0.2)" > "$s/calibrate.out" 2>&1
    rc=$?
    cp "$s/calibration.yaml" "$out/h200-calibration.yaml" 2>/dev/null
    echo "{\"bench\": \"calibrate\", \"ok\": $([[ $rc == 0 ]] && echo true || echo false), \"file\":" \
      "\"\$OUT/h200-calibration.yaml\", \"device\": \"${device_flag[1]:-host CPU}\"}" >> "$ours"
    if ((rc == 0)); then
      result PASS "speed tune calibrate" \
        "wrote \$OUT/h200-calibration.yaml (measured on ${device_flag[1]:-the host CPU})"
      local run model config sets
      for run in "${runs[@]}"; do
        IFS='|' read -r model config sets <<<"$run"
        # shellcheck disable=SC2086
        tune_predicts "$ours" "$model" "$config" $sets
      done
    else
      result ERROR "speed tune calibrate" "$(why_failed "$rc" "$lim" "$s/calibrate.out")"
    fi
  fi

  if speed_part graph; then
    # train.cuda_graph (docs/devices.md, "Graphs"): the same run with and without the graph of its
    # micro batch, on the GPU (the test device in a dry run, which records graphs too). Its default
    # turns on where the graph measures faster. gpt2-124m: many small kernels; the 1.3B at 8K: few large ones.
    local graph_device="$bench_device" graph_specs=("gpt2-124m configs/gpt2-124m.yaml 8 1024"
                                                      "gpt-1.3b.T${seqs[0]} configs/gpt-1.3b.yaml 1 ${seqs[0]}")
    [[ $small == 1 ]] && graph_device="$device" graph_specs=("gpt2-124m configs/gpt2-124m.yaml 1 64")
    local spec gname gconfig gbatch gseq graph mode
    for spec in "${graph_specs[@]}"; do
      read -r gname gconfig gbatch gseq <<<"$spec"
      for graph in false true; do
        mode=eager
        [[ $graph == true ]] && mode=captured
        # shellcheck disable=SC2046 # the small model's settings are words
        bench_device="$graph_device" measured_run "$ours" "$steps_warm" \
          "bench=graph model=$gname batch=$gbatch seq=$gseq graph=$mode" "$(limit 120)" bf16 "graph.$gname.$mode" \
          "$root/$gconfig" "${one[@]}" $([[ $small == 1 ]] && echo "${small_gpt[@]}") --set data.source=synthetic \
          --set train.seq_len="$gseq" --set model.max_seq_len="$gseq" --set train.micro_batch_size="$gbatch" \
          --set train.global_batch_size="$gbatch" --set train.steps=$((steps_warm + steps_timed)) \
          --set train.warmup_steps=1 --set train.log_every=1 --set train.eval_every=0 --set checkpoint.every=-1 \
          --set train.cuda_graph="$graph"
      done
    done
  fi

  if speed_part longest; then
    # The longest sequence that trains one step: doubling from twice the longest measured, with the
    # attention-output checkpoints, until a step fails (out of memory) or the next would not fit in
    # what is left of the budget (a step at 2N costs about 4x one at N; each run's limit is cut to it).
    local ok="" why="" last_s=0 started
    T=$((2 * seqs[-1]))
    while ((T <= longest_max)); do
      lim=$(limit 240)
      if ((lim < 20 || lim < 4 * last_s)); then
        why="stopped before $T: ${lim} s left, a step there needs ~$((4 * last_s)) s"
        break
      fi
      started=$SECONDS
      train "gpt-1.3b.longest.T$T" "$bench_device" bf16 "$lim" "$root/configs/gpt-1.3b.yaml" "${one[@]}" \
        "${small_gpt[@]}" --set train.seq_len=$T --set model.max_seq_len=$T --set model.checkpoint_attention=true \
        --set train.micro_batch_size=1 --set train.global_batch_size=1 --set train.steps=1 --set train.log_every=1 \
        --set train.eval_every=0 --set checkpoint.every=-1
      rc=$?
      if ((rc != 0)); then
        why="$T failed: $(why_failed "$rc" "$lim" "$work/runs/gpt-1.3b.longest.T$T.out" 1)"
        break
      fi
      ok=$T last_s=$((SECONDS - started))
      T=$((2 * T))
    done
    ((T > longest_max)) && why="stopped at WF_SPEED_LONGEST_MAX $longest_max"
    python3 -c 'import json, sys
print(json.dumps({"bench": "longest", "seq": int(sys.argv[1] or 0), "why": sys.argv[2], "how": sys.argv[3]}))' \
      "$ok" "${why//|/\/}" "doubling from $((2 * seqs[-1])), attention-output checkpoints, 1 step" >> "$ours"
    if [[ -n $ok ]]; then result PASS "speed longest" "$ok tokens trained a step; $why"
    else result ERROR "speed longest" "no length trained a step: $why"
    fi
  fi
}

# ---- the table and the summary -------------------------------------------------------------------
table() {
  phase "table"
  python3 "$root/scripts/device_check_tables.py" "$work" "$out" "$dry" \
    "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
}

summary() {
  echo
  echo "=== summary ($((SECONDS - t0)) s)"
  cut -f1,2 "$work/results.tsv" | awk -F'\t' '{printf "%-5s %s\n", $1, $2}'
  if grep -qE "^(FAIL|ERROR)" "$work/results.tsv"; then
    echo "device check: FAILED ($(grep -cE "^(FAIL|ERROR)" "$work/results.tsv") phases failed or could not run)"
    return 1
  fi
  echo "device check: every phase passed$([[ $dry == 1 ]] && echo ' (dry run: the GPU phases were skipped)')"
}

main() {
  echo "device check: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -n), device $device, $steps steps," \
    "budget $budget s$([[ $dry == 1 ]] && echo ', DRY RUN')"
  if ! setup; then summary; return 1; fi
  mkdir -p "$work/runs"
  if wanted parity; then
    cpu_halves &
    cpu_pid=$!
  fi
  if ! versions && [[ $dry != 1 ]]; then  # no GPU: nothing else can run
    wanted parity && stop_cpu_halves
    summary
    return 1
  fi
  wanted tests && tests
  wanted parity && parity
  wanted sp4 && sp4
  wanted layouts && layouts
  wanted spbench && spbench
  wanted bench && bench
  wanted speed && speed
  wanted documents && documents
  table
  summary
}

rm -rf "$work" "$prefix"
mkdir -p "$work" "$prefix" "$out"
: > "$work/results.tsv"
# Sourced (to try one phase by hand: `source scripts/device-check.sh; setup; tests`), it stops here.
[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0
main 2>&1 | tee "$out/device-check.log"
exit "${PIPESTATUS[0]}"
