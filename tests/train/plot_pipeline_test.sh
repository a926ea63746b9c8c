#!/usr/bin/env bash
# scripts/plot-pipeline.sh: draws a Gantt chart PNG from synthetic pp-timeline-rank<R>.json files
# (a simulated 1F1B step, 4 stages x 8 microbatches, on world ranks 0, 2, 4, 6 — stage = W / 2),
# prints each row's measured bubble as the files imply; and refuses bad input with a message that
# names the problem and a non-zero status: no arguments, a missing DIR, a DIR without timelines,
# a malformed or incomplete file (named), files of different runs, no gnuplot on PATH.
#
#   tests/train/plot_pipeline_test.sh [KEEP_DIR]   (KEEP_DIR: also copy the PNG there, to look at)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
script="$root/scripts/plot-pipeline.sh"
run_script() { bash "$script" "$@"; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A 1F1B step simulated event by event: forwards 10 ms, backwards 20 ms, 0.5 ms per transfer,
# 0.2 ms of bookkeeping between actions, and a final wait for the last sends; the expected
# bubble of every row goes to expected.txt.
mkdir "$work/tl"
/usr/bin/python3 - "$work/tl" "$work/expected.txt" <<'PY'
import json, sys
out, expected = sys.argv[1:3]
p, m = 4, 8
tf, tb, latency, gap, drain = 0.010, 0.020, 0.0005, 0.0002, 0.0008
order = []
for s in range(p):
    warm = min(p - 1 - s, m)
    acts = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        acts += [("F", warm + i), ("B", i)]
    acts += [("B", i) for i in range(m - warm, m)]
    order.append(acts)
end = {}
events = [[] for _ in range(p)]
free = [0.0] * p
at = [0] * p
while any(at[s] < len(order[s]) for s in range(p)):
    progressed = False
    for s in range(p):
        if at[s] == len(order[s]):
            continue
        op, mb = order[s][at[s]]
        dep = (op, mb, s - 1) if op == "F" and s > 0 else (op, mb, s + 1) if op == "B" and s < p - 1 else None
        if dep is not None and dep not in end:
            continue
        start = free[s] + (gap if at[s] else 0.0)
        ready = max(start, end[dep] + latency) if dep else start
        finish = ready + (tf if op == "F" else tb)
        end[(op, mb, s)] = finish
        events[s].append({"op": op, "mb": mb, "chunk": 0, "start": start, "end": finish, "wait": ready - start})
        free[s] = finish
        at[s] += 1
        progressed = True
    assert progressed, "the simulated schedule deadlocked"
with open(expected, "w") as f:
    for s in range(p):
        step = free[s] + (drain if s > 0 else 0.0)
        wait = sum(e["wait"] for e in events[s]) + (drain if s > 0 else 0.0)
        with open(f"{out}/pp-timeline-rank{2 * s}.json", "w") as t:
            t.write(json.dumps({"rank": s, "stages": p, "microbatches": m, "virtual": 1, "schedule": "1f1b",
                                "step_s": step, "wait_s": wait, "events": events[s]}) + "\n")
        print(f"world rank {2 * s} / stage {s}: bubble {wait / (step - wait):.3f} (ideal {(p - 1) / m:.3f})", file=f)
PY

# The chart.
run_script "$work/tl" "$work/chart/pipeline.png" > "$work/out.txt" 2> "$work/err.txt" \
  || { cat "$work/out.txt" "$work/err.txt"; fail "plot-pipeline.sh failed on good input"; }
png="$work/chart/pipeline.png"
[ -f "$png" ] || fail "no $png"
[ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$png is not a PNG"
size="$(wc -c < "$png")"
[ "$size" -gt 20000 ] || fail "$png is only $size bytes: an empty chart?"
grep -q "^wrote $png\$" "$work/out.txt" || { cat "$work/out.txt"; fail "no 'wrote $png' line"; }
while read -r line; do
  grep -qF "$line" "$work/out.txt" || { cat "$work/out.txt"; fail "expected the row '$line'"; }
done < "$work/expected.txt"
# The default output, DIR/pipeline.png.
run_script "$work/tl" > /dev/null || fail "plot-pipeline.sh failed without OUT.png"
[ -s "$work/tl/pipeline.png" ] || fail "no default DIR/pipeline.png"
[ "$#" -ge 1 ] && cp "$png" "$1/"

# expect STATUS PATTERN ARGS...: the script exits STATUS and says PATTERN (an ERE) on stderr.
expect() {
  local want="$1" pattern="$2"; shift 2
  local status=0
  "$@" > "$work/out.txt" 2> "$work/err.txt" || status=$?
  [ "$status" -eq "$want" ] || { cat "$work/err.txt"; fail "$* exited $status, not $want"; }
  grep -qE "$pattern" "$work/err.txt" || { cat "$work/err.txt"; fail "$* did not say /$pattern/"; }
}
expect 2 "usage: scripts/plot-pipeline.sh DIR" run_script
expect 2 "$work/nowhere, not a directory" run_script "$work/nowhere" "$work/x.png"
mkdir "$work/empty"
expect 1 "no pp-timeline-rank<R>.json files in $work/empty \(.*parallel.pp > 1" run_script "$work/empty" "$work/x.png"
mkdir -p "$work/logdir/pp-timeline"
expect 1 "did you mean $work/logdir/pp-timeline\?" run_script "$work/logdir" "$work/x.png"

bad() {  # bad NAME: a copy of the good timelines as $work/NAME
  rm -rf "${work:?}/$1"; cp -r "$work/tl" "$work/$1"; rm -f "$work/$1/pipeline.png"
}
bad truncated; head -c 200 "$work/tl/pp-timeline-rank4.json" > "$work/truncated/pp-timeline-rank4.json"
expect 1 "$work/truncated/pp-timeline-rank4.json: malformed JSON" run_script "$work/truncated" "$work/x.png"
bad blank; : > "$work/blank/pp-timeline-rank2.json"
expect 1 "$work/blank/pp-timeline-rank2.json: empty" run_script "$work/blank" "$work/x.png"
bad nokey; echo '{"rank": 1, "stages": 4, "microbatches": 8, "virtual": 1, "schedule": "1f1b", "wait_s": 0, "events": []}' \
  > "$work/nokey/pp-timeline-rank2.json"
expect 1 "$work/nokey/pp-timeline-rank2.json: \"step_s\" is null, not a number" run_script "$work/nokey" "$work/x.png"
bad badevent; echo '{"rank": 1, "stages": 4, "microbatches": 8, "virtual": 1, "schedule": "1f1b", "step_s": 1, "wait_s": 0, "events": [{"op": "X"}]}' \
  > "$work/badevent/pp-timeline-rank2.json"
expect 1 "$work/badevent/pp-timeline-rank2.json: event 0: \"op\" is \"X\"" run_script "$work/badevent" "$work/x.png"
bad mixed; sed 's/"microbatches": 8/"microbatches": 16/' "$work/tl/pp-timeline-rank6.json" > "$work/mixed/pp-timeline-rank6.json"
expect 1 "pp-timeline-rank6.json says microbatches 16 but .* says 8: files of different runs" \
  run_script "$work/mixed" "$work/x.png"
mkdir "$work/nobin"
expect 1 "needs gnuplot, which is not on PATH \(Debian: apt-get install gnuplot-nox\)" \
  env PATH="$work/nobin" /bin/bash "$script" "$work/tl" "$work/x.png"
[ ! -e "$work/x.png" ] || fail "a refused run wrote $work/x.png"
echo "plot-pipeline: chart and error cases pass"
