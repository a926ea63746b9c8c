#!/usr/bin/env bash
# `wallfacer sample --out ''` (an empty argument, which a CMake test cannot pass) and --out into a
# directory that does not exist are usage errors naming the problem and the fix, before any model
# is built or sampled.
#
#   tests/cli/sample_out_test.sh WALLFACER_EXE SOURCE_DIR
set -uo pipefail
exe="$1" src="$2"
fail() { echo "FAIL: $*"; exit 1; }

expect() {  # expect STATUS MESSAGE ARGS...: the exit status and one error line holding MESSAGE
  local status="$1" message="$2"
  shift 2
  local err rc
  err="$("$exe" sample "$src/configs/dit-fashion.yaml" --checkpoint "$src" "$@" 2>&1 >/dev/null)"
  rc=$?
  [ "$rc" = "$status" ] || fail "sample $*: exit status $rc, expected $status: $err"
  [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] || fail "sample $*: expected one error line, got: $err"
  case "$err" in *"$message"*) ;; *) fail "sample $*: expected '$message', got: $err" ;; esac
}

expect 2 "wallfacer: error: --out: an empty path names no file; give the file to write, e.g. --out samples.png" \
  --out ''
expect 2 "--out: '/tmp' is a directory; give the file to write in it, e.g. --out samples.png" --out /tmp
expect 1 "--out /no-such-directory/grid.png: cannot write the file (does its directory exist?)" \
  --out /no-such-directory/grid.png
echo "PASS"
