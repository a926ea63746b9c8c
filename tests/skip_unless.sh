#!/usr/bin/env bash
# Runs a test that needs an optional oracle (PyTorch, the GPT-2 vocabulary, ...) only where the
# oracle is there; elsewhere prints why and exits 77, which CTest reports as SKIPPED (the test's
# SKIP_RETURN_CODE), so that a missing oracle is never mistaken for a pass.
#
#   tests/skip_unless.sh "WHAT IS MISSING AND HOW TO GET IT" CHECK_COMMAND... -- TEST_COMMAND...
set -uo pipefail
reason="$1"; shift
check=()
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do check+=("$1"); shift; done
if [ "$#" -eq 0 ]; then
  echo "skip_unless.sh: no '--' before the test command" >&2
  exit 2
fi
shift
if ! "${check[@]}" > /dev/null 2>&1; then
  echo "SKIPPED: $reason"
  exit 77
fi
exec "$@"
