#!/usr/bin/env bash
# Configures and builds wallfacer with CMake and Ninja (ccache is used when installed).
#
#   scripts/build.sh [BUILD_DIR] [extra cmake -D arguments...]
#
# BUILD_DIR defaults to build/; a relative path is taken from the repository root.
# Environment:
#   WF_BUILD_TYPE   CMake build type (default Release)
#   WF_SANITIZE     sanitizers, e.g. WF_SANITIZE=address,undefined scripts/build.sh build-asan
#   WF_JOBS         parallel build jobs (default: all cores)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
if [ "$#" -gt 0 ]; then shift; fi
case "$build_dir" in
  /*) ;;
  *) build_dir="$root/$build_dir" ;;
esac

# Paths relative to the repository root in ccache's hashes: a fresh clone elsewhere (CI) reuses
# what an earlier build on this machine compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"

# WF_SANITIZE is always passed, so a build tree reused without it drops the sanitizers
# instead of silently keeping the cached value.
cmake -S "$root" -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE="${WF_BUILD_TYPE:-Release}" \
  -DWF_SANITIZE="${WF_SANITIZE:-}" \
  "$@"
cmake --build "$build_dir" -j "${WF_JOBS:-$(nproc)}"
