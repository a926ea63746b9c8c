#!/usr/bin/env bash
# Prepares, on this (GPU-less) machine, the folder that scripts/device-check.sh needs on the GPU
# machine (docs/gpu.md): a Release build for sm_90 only and the Debian runtime libraries that the
# GPU machine's image lacks, inside the 64 MiB that travels (the working tree included).
#
#   scripts/device-pack.sh [PACK_DIR]        (default device-pack/, ignored by git)
#
# PACK_DIR then holds:
#   build.tar.xz   bin/ (wallfacer, test_cuda, wf_gpu_probe, test_dist when tests/dist has CUDA
#                  cases) and lib/libwallfacer.so.0, stripped
#   debs/*.deb     the packages of every library the binaries load that is neither glibc nor
#                  CUDA's (found with ldd and dpkg -S here), and Open MPI's runtime (mpirun, its
#                  plugins and PMIx), unpacked there into a prefix under /tmp, never onto /
#   debs/fallback/ libstdc++ and libgcc, used there only when the image's own are too old
#   data/          a 2048-image slice of Fashion-MNIST for the DiT run
#   MANIFEST.txt   commit, build flags, compilers, every file and its size
# CUDA, cuBLAS(Lt), cuDNN and NCCL are not taken: the GPU machine has its own (its PyTorch wheels'
# and /usr/local/cuda), found there at run time.
#
# Environment: WF_JOBS (build jobs, default: all cores), WF_DEVICE_BUILD_DIR (default build-sm90).
# Fails, saying by how much, when what would travel exceeds 64 MiB.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pack="${1:-device-pack}"
case "$pack" in /*) ;; *) pack="$root/$pack" ;; esac
build="${WF_DEVICE_BUILD_DIR:-build-sm90}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
limit=$((64 * 1024 * 1024))
fashion="${WF_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
die() { echo "device-pack: error: $*" >&2; exit 1; }

# The pack must be ignored by git, or it would travel twice (as the tree and as the carry).
rel="${pack#"$root"/}"
[[ $rel != /* ]] || die "$pack is outside the repository: the device tool carries folders of the repository only"
git -C "$root" check-ignore -q "$rel/MANIFEST.txt" ||
  die "$rel is not ignored by git: add it to .gitignore (the device tool carries it as an ignored path)"

# ---- the build -------------------------------------------------------------------------------
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWF_SANITIZE= \
  -DWF_CUDA=ON -DWF_CUDA_ARCHITECTURES=90 > "$build/configure.log" 2>&1 ||
  { tail -20 "$build/configure.log" >&2; die "configuring $build failed (the log is above)"; }
targets=(wallfacer_cli test_cuda wf_gpu_probe)
# test_dist travels only when it holds CUDA cases (the multi-rank GPU tests).
if grep -qsE '\[(cuda|gpu)\]' "$root"/tests/dist/*.cpp; then targets+=(test_dist); fi
cmake --build "$build" -j "${WF_JOBS:-$(nproc)}" --target "${targets[@]}"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
strip -o "$stage/bin/wallfacer" "$build/wallfacer"
for t in "${targets[@]:1}"; do strip -o "$stage/bin/$t" "$build/tests/$t"; done
strip -o "$stage/lib/libwallfacer.so.0" "$(readlink -f "$build/libwallfacer.so.0")"

# ---- the Debian packages ---------------------------------------------------------------------
# Libraries there from glibc itself, or newer than ours on any image that runs CUDA 13: not taken.
is_system() { [[ "$1" =~ ^(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so ]]; }
is_fallback() { [[ "$1" =~ ^(libstdc\+\+|libgcc_s)\.so ]]; }
# The package that owns a library file (Debian 12 merges /lib into /usr/lib; dpkg knows one of them).
owner() {
  local path="$1" p
  for p in "$path" "$(readlink -f "$path")" "/usr${path#/usr}" "${path#/usr}"; do
    dpkg -S "$p" 2>/dev/null | head -1 | cut -d: -f1 && return 0
  done
  return 1
}
declare -A packages=() fallback=()
while read -r soname path; do
  is_system "$soname" && continue
  [ "$soname" = libwallfacer.so.0 ] && continue
  if is_fallback "$soname"; then fallback[$(owner "$path")]=1; continue; fi
  if pkg="$(owner "$path")" && [ -n "$pkg" ]; then
    packages[$pkg]=1
  elif [[ "$path" == /usr/local/cuda* ||
          "$soname" =~ ^lib(cuda|cudart|cublas|cublasLt|cudnn|nccl|nvrtc|nvJitLink) ]]; then
    :  # the GPU machine's own
  else
    die "$soname ($path) belongs to no Debian package and is not CUDA's: the GPU machine would lack it"
  fi
done < <(LD_LIBRARY_PATH="$stage/lib" ldd "$stage"/bin/* "$stage"/lib/* | awk '/=> \//{print $1, $3}' | sort -u)
# Open MPI's launcher, its help and config files, and PMIx (loaded as plugins: ldd does not see them).
for pkg in openmpi-bin openmpi-common libpmix2; do packages[$pkg]=1; done
mapfile -t wanted < <(printf '%s\n' "${!packages[@]}" | sort)
mapfile -t wanted_fallback < <(printf '%s\n' "${!fallback[@]}" | sort)
echo "device-pack: Debian packages: ${wanted[*]}"
echo "device-pack: fallback packages: ${wanted_fallback[*]}"
mkdir -p "$stage/debs/fallback"
(cd "$stage/debs" && apt-get download "${wanted[@]}" > "$stage/apt.log" 2>&1) ||
  { cat "$stage/apt.log" >&2; die "apt-get download failed (the log is above)"; }
(cd "$stage/debs/fallback" && apt-get download "${wanted_fallback[@]}" >> "$stage/apt.log" 2>&1) ||
  { cat "$stage/apt.log" >&2; die "apt-get download of the fallback libraries failed (the log is above)"; }
# Plain file names for the transfer (apt's carry %3a for an epoch's colon, and libstdc++ a '+').
for f in "$stage"/debs/*.deb "$stage"/debs/fallback/*.deb; do
  plain="$(basename "$f" | sed 's/%3a/_/g; s/[^A-Za-z0-9._-]/_/g')"
  [[ $plain == "$(basename "$f")" ]] || mv "$f" "$(dirname "$f")/$plain"
done

# ---- data ----------------------------------------------------------------------------------
# DiT-fashion's 20 steps read 640 images: the first 2048 of the training split travel (the
# whole split is 26 MiB).
mkdir -p "$stage/data"
[ -f "$fashion/train-images-idx3-ubyte.gz" ] ||
  die "no Fashion-MNIST in $fashion (apt-get install dataset-fashion-mnist, or set WF_FASHION_MNIST_DIR)"
python3 - "$fashion" "$stage/data" 2048 <<'PY'
import gzip, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for name, item in (("train-images-idx3-ubyte.gz", 28 * 28), ("train-labels-idx1-ubyte.gz", 1)):
    with gzip.open(f"{src}/{name}") as f:
        magic = f.read(4)
        dims = magic[3]  # IDX: 0, 0, type, number of dimensions; then one big-endian u32 per dimension
        shape = list(struct.unpack(f">{dims}I", f.read(4 * dims)))
        shape[0] = n
        body = f.read(n * item)
    with gzip.GzipFile(f"{dst}/{name}", "wb", mtime=0) as out:
        out.write(magic + struct.pack(f">{dims}I", *shape) + body)
PY

# ---- assemble --------------------------------------------------------------------------------
rm -rf "$pack"
mkdir -p "$pack"
tar -C "$stage" -cf - bin lib | xz -6 -T"${WF_JOBS:-0}" > "$pack/build.tar.xz"
cp -r "$stage/debs" "$stage/data" "$pack/"
{
  echo "wallfacer device pack (scripts/device-pack.sh; used by scripts/device-check.sh)"
  echo "commit: $(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet HEAD ||
    echo ' (with uncommitted changes)')"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(sed -n 's/^PRETTY_NAME="\(.*\)"/\1/p' /etc/os-release)"
  nvcc="$(grep -m1 '^CUDAToolkit_NVCC_EXECUTABLE:' "$build/CMakeCache.txt" | cut -d= -f2)"
  echo "build: Release, WF_CUDA_ARCHITECTURES=90, c++ $(c++ -dumpfullversion), $("$nvcc" --version | tail -1)"
  echo "cubins in libwallfacer: $("$(dirname "$nvcc")/cuobjdump" --list-elf "$stage/lib/libwallfacer.so.0" 2>/dev/null |
    grep -o 'sm_[0-9a-z]*' | sort | uniq -c | xargs || true)"
  echo "binaries (uncompressed, stripped):"
  (cd "$stage" && find bin lib -type f -printf '  %p %s\n' | sort)
  echo "files:"
  (cd "$pack" && find . -type f ! -name MANIFEST.txt -printf '  %P %s\n' | sort)
} > "$pack/MANIFEST.txt"

# ---- what travels --------------------------------------------------------------------------
# The device tool sends the tracked files, the untracked ones git does not ignore, shared/ and the
# carried paths: 64 MiB in all.
bytes() { (cd "$root" && tr '\n' '\0' | xargs -0 -r du -cb --apparent-size -- 2>/dev/null | awk 'END{print $1+0}'); }
tree_bytes=$( { git -C "$root" ls-files; git -C "$root" ls-files -o --exclude-standard; } | sort -u | bytes)
shared_bytes=0
[ -d "$root/shared" ] && shared_bytes=$(du -sb --apparent-size "$root/shared" | cut -f1)
pack_bytes=$(du -sb --apparent-size "$pack" | cut -f1)
total=$((tree_bytes + shared_bytes + pack_bytes))
mib() { awk -v b="$1" 'BEGIN{printf "%.1f MiB", b / 1048576}'; }
size_of() { du -sb --apparent-size "$1" | cut -f1; }
echo "device-pack: $pack: $(mib "$pack_bytes") (build.tar.xz $(mib "$(size_of "$pack/build.tar.xz")")," \
  "debs $(mib "$(size_of "$pack/debs")"), data $(mib "$(size_of "$pack/data")"))"
echo "device-pack: working tree $(mib "$tree_bytes"), shared/ $(mib "$shared_bytes");" \
  "travels $(mib "$total") of $(mib "$limit"): $(mib $((limit - total))) left"
if ((total > limit)); then
  die "what would travel is $(mib $((total - limit))) over the device tool's 64 MiB:" \
    "leave test_dist out, compress harder, or shrink the tree"
fi
echo "device-pack: ready. On the GPU machine, with ${rel} carried: scripts/device-check.sh ${rel}"
