#!/usr/bin/env bash
# Draws one pipeline-parallel training step as a PNG Gantt chart, so a bubble is seen.
#
#   scripts/plot-pipeline.sh <log.dir>/pp-timeline [OUT.png]
#
# Reads the per-rank timelines `wallfacer train` writes with parallel.pp > 1
# (<log.dir>/pp-timeline/pp-timeline-rank<R>.json, R the world rank; the JSON of
# train::PipelineRunner::timeline_json) and writes OUT.png (default: DIR/pipeline.png): one row
# per file, labelled "world rank W / stage S", time since the step began across. Each action is
# a bar: its wait for a neighbour light grey, its compute blue (forwards) or orange (backwards),
# shaded by microbatch and labelled with it ("mb.chunk" when virtual > 1) where wide enough; the
# final wait for outstanding sends is hatched grey. Right of each row: its measured bubble,
# wait_s / (step_s - wait_s), beside the schedule's ideal, (p-1)/m or (p-1)/(v*m) interleaved.
# Prints the same per-row bubbles. Uses gnuplot (Debian: gnuplot-nox) and /usr/bin/python3.
#
# Exit status: 0 written; 1 no timeline files, a file that is not a timeline (named), files of
# different runs, no gnuplot, or gnuplot failed; 2 usage (DIR missing or not a directory).
set -euo pipefail

if [ "$#" -lt 1 ] || [ "$#" -gt 2 ] || [ ! -d "$1" ]; then
  echo "usage: scripts/plot-pipeline.sh DIR [OUT.png]  (got: ${1:-nothing}${1:+, not a directory};" \
       "DIR is <log.dir>/pp-timeline of a run with parallel.pp > 1)" >&2
  exit 2
fi
dir="$1"
out="${2:-$dir/pipeline.png}"

shopt -s nullglob
files=("$dir"/pp-timeline-rank*.json)
shopt -u nullglob
if [ "${#files[@]}" -eq 0 ]; then
  hint="\`wallfacer train\` with parallel.pp > 1 writes them to <log.dir>/pp-timeline/ at each logged step"
  [ -d "$dir/pp-timeline" ] && hint="did you mean $dir/pp-timeline?"
  echo "plot-pipeline: no pp-timeline-rank<R>.json files in $dir ($hint)" >&2
  exit 1
fi

if ! command -v gnuplot > /dev/null; then
  echo "plot-pipeline: needs gnuplot, which is not on PATH (Debian: apt-get install gnuplot-nox)" >&2
  exit 1
fi
terminal="png"
if grep -qw pngcairo <<<"$(gnuplot -e 'set terminal' 2>&1)"; then terminal="pngcairo"; fi

mkdir -p "$(dirname "$out")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# python3 checks every file and writes the whole gnuplot script (one `set object rect` per bar);
# it prints the per-row bubbles to stdout and exits 1 with the problem on stderr.
/usr/bin/python3 - "$terminal" "$out" "$work/plot.gp" "${files[@]}" <<'PY'
import json, math, os, re, sys

terminal, out, script = sys.argv[1:4]
paths = sys.argv[4:]

def fail(message):
    print("plot-pipeline: " + message, file=sys.stderr)
    sys.exit(1)

def number(path, where, obj, key, integer=False):
    v = obj.get(key)
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or (not integer and not math.isfinite(v)):
        fail(f"{path}: {where}\"{key}\" is {json.dumps(v)}, not a{'n integer' if integer else ' number'} "
             "(is it a pp-timeline file of `wallfacer train`?)")
    return v

rows = []
for path in paths:
    name = os.path.basename(path)
    m = re.fullmatch(r"pp-timeline-rank(\d+)\.json", name)
    if not m:
        fail(f"{path}: the name should be pp-timeline-rank<R>.json with R the world rank; rename or remove it")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        fail(f"{path}: cannot read it: {e}")
    if not text.strip():
        fail(f"{path}: empty (a run killed while writing? rerun, or remove the file)")
    try:
        j = json.loads(text)
    except json.JSONDecodeError as e:
        fail(f"{path}: malformed JSON ({e}); rerun the step that wrote it, or remove the file")
    if not isinstance(j, dict):
        fail(f"{path}: holds a JSON {type(j).__name__}, not the object of one rank's timeline")
    row = {"path": path, "world": int(m.group(1))}
    for key in ("rank", "stages", "microbatches", "virtual"):
        row[key] = number(path, "", j, key, integer=True)
    for key in ("step_s", "wait_s"):
        row[key] = float(number(path, "", j, key))
    if not isinstance(j.get("schedule"), str):
        fail(f"{path}: \"schedule\" is {json.dumps(j.get('schedule'))}, not a schedule name")
    row["schedule"] = j["schedule"]
    if row["stages"] < 1 or row["microbatches"] < 1 or row["virtual"] < 1:
        fail(f"{path}: stages {row['stages']}, microbatches {row['microbatches']}, virtual {row['virtual']}: "
             "each must be at least 1")
    if not 0 <= row["rank"] < row["stages"]:
        fail(f"{path}: stage (\"rank\") {row['rank']} is outside 0..{row['stages'] - 1}")
    events = j.get("events")
    if not isinstance(events, list):
        fail(f"{path}: \"events\" is {json.dumps(events)}, not a list of actions")
    row["events"] = []
    for i, e in enumerate(events):
        where = f"event {i}: "
        if not isinstance(e, dict):
            fail(f"{path}: {where}not an object")
        if e.get("op") not in ("F", "B"):
            fail(f"{path}: {where}\"op\" is {json.dumps(e.get('op'))}, not \"F\" or \"B\"")
        ev = {"op": e["op"]}
        for key in ("mb", "chunk"):
            ev[key] = number(path, where, e, key, integer=True)
        for key in ("start", "end", "wait"):
            ev[key] = float(number(path, where, e, key))
        if ev["end"] < ev["start"] or ev["wait"] < 0:
            fail(f"{path}: {where}start {ev['start']}, end {ev['end']}, wait {ev['wait']}: "
                 "needs start <= end and wait >= 0")
        ev["wait"] = min(ev["wait"], ev["end"] - ev["start"])
        row["events"].append(ev)
    rows.append(row)

first = rows[0]
for row in rows[1:]:
    for key in ("schedule", "stages", "microbatches", "virtual"):
        if row[key] != first[key]:
            fail(f"{row['path']} says {key} {row[key]} but {first['path']} says {first[key]}: "
                 "files of different runs in one folder; keep only the latest run's")

p, mbs, v, kind = first["stages"], first["microbatches"], first["virtual"], first["schedule"]
ideal = (p - 1) / (v * mbs)
ideal_formula = f"(p-1)/(v*m) = {p - 1}/{v * mbs}" if v > 1 else f"(p-1)/m = {p - 1}/{mbs}"
# Top to bottom in pipeline order: by stage, then world rank.
rows.sort(key=lambda r: (r["rank"], r["world"]))
for row in rows:
    compute = row["step_s"] - row["wait_s"]
    row["bubble"] = row["wait_s"] / compute if compute > 0 else 0.0
    row["label"] = f"world rank {row['world']} / stage {row['rank']}"
    print(f"{row['label']}: bubble {row['bubble']:.3f} (ideal {ideal:.3f}), "
          f"step {row['step_s'] * 1e3:.1f} ms, waiting {row['wait_s'] * 1e3:.1f} ms")

end = max([r["step_s"] for r in rows] + [e["end"] for r in rows for e in r["events"]])
xmax = end * 1.01 if end > 0 else 1.0
# Time in ms when the step is under 10 s, so tick labels stay short.
scale, unit = (1e3, "ms") if end < 10 else (1.0, "s")

n = len(rows)
left, right = 0.15, 0.85  # the plot's edges, as fractions of the canvas
# Wider for long schedules, so bars keep room for a two-digit label: ~26 px per action.
most = max(len(r["events"]) for r in rows)
width = int(min(4000, max(1500, most * 26 / (right - left))))
height = 170 + 46 * n
bottom_px, top_px = 135, 75
px_per_unit = (right - left) * width / (xmax * scale)
char_px = 7.0  # a label character at font size 9

def mix(a, b, t):
    return tuple(round(x + (y - x) * t) for x, y in zip(a, b))

families = {"F": ((8, 69, 148), (158, 202, 225)),   # dark to light blue
            "B": ((140, 45, 4), (253, 174, 107))}   # dark to light orange

def colour(op, mb, chunk):
    # Shade by microbatch (and chunk when interleaved) so neighbouring bars differ.
    k = mb * v + chunk
    t = (k % 8) / 7 if v * mbs > 1 else 0.0
    return mix(*families[op], t)

def hexrgb(c):
    return "#%02x%02x%02x" % c

def text_colour(c):
    return "black" if 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2] > 150 else "white"

def q(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

gp = []
w = gp.append
font = 'font "sans,10"' if terminal == "pngcairo" else ""
label_font = 'font "sans,9"' if terminal == "pngcairo" else ""
w(f"set terminal {terminal} size {width},{height} noenhanced {font}")
w(f"set output {q(out)}")
title = (f"pipeline step: schedule {kind}, {p} stages, {mbs} microbatches, virtual {v}; "
         f"ideal bubble {ideal_formula} = {ideal:.3f}; measured per row at right: wait / (step - wait)")
w(f"set title {q(title)}")
w(f"set lmargin at screen {left}")
w(f"set rmargin at screen {right}")
w(f"set bmargin at screen {bottom_px / height:.4f}")
w(f"set tmargin at screen {1 - top_px / height:.4f}")
w(f"set xrange [0:{xmax * scale!r}]")
w(f"set yrange [{n - 0.5}:-0.5]")
w(f"set xlabel {q(f'time since the step began ({unit})')}")
w("set xtics nomirror out")
w("set mxtics")
w("set grid xtics mxtics lc rgb '#e4e4e4' lt 1, lc rgb '#f2f2f2' lt 1 back")
w("set ytics (" + ", ".join(f"{q(r['label'])} {i}" for i, r in enumerate(rows)) + ") nomirror scale 0")
w("set y2range [" + f"{n - 0.5}:-0.5]")
bubble_tics = [f"{q('bubble %.3f (ideal %.3f)' % (r['bubble'], ideal))} {i}" for i, r in enumerate(rows)]
w("set y2tics (" + ", ".join(bubble_tics) + ") scale 0")
w(f"set key at screen 0.5,{(bottom_px - 62) / height:.4f} center top horizontal maxrows 2 reverse Left "
  "samplen 2 spacing 1.2 width 2 noautotitle")
w("set style fill solid 1.0 noborder")

obj = 0
def rect(x0, x1, y, fill, pattern=None, half=0.38, border=None):
    global obj
    if x1 <= x0:
        return
    obj += 1
    style = f"fs pattern {pattern} border lc rgb '#9a9a9a'" if pattern is not None else \
        (f"fs solid 1.0 border lc rgb '{border}'" if border else "fs solid 1.0 noborder")
    w(f"set object {obj} rect from {x0 * scale!r},{y - half} to {x1 * scale!r},{y + half} "
      f"fc rgb '{fill}' {style} back lw 0.5")

for y, row in enumerate(rows):
    last_end = 0.0
    for e in row["events"]:
        split = e["start"] + e["wait"]
        rect(e["start"], split, y, "#cfcfcf")
        c = colour(e["op"], e["mb"], e["chunk"])
        rect(split, e["end"], y, hexrgb(c), border="#ffffff")
        label = f"{e['mb']}.{e['chunk']}" if v > 1 else str(e["mb"])
        if (e["end"] - split) * scale * px_per_unit >= char_px * len(label) + 6:
            w(f"set label {q(label)} at {(split + e['end']) / 2 * scale!r},{y} center front "
              f"tc rgb '{text_colour(c)}' {label_font}")
        last_end = max(last_end, e["end"])
    # Waiting for this rank's outstanding sends after its last action: counted in wait_s.
    rect(last_end, row["step_s"], y, "#9a9a9a", pattern=4)
    # Where this rank's step ended.
    w(f"set arrow from {row['step_s'] * scale!r},{y - 0.46} to {row['step_s'] * scale!r},{y + 0.46} "
      "nohead lc rgb 'black' lw 1.5 front")

def key(fill, title, extra="fs solid 1.0 noborder"):
    return f"NaN with boxes fc rgb '{fill}' {extra} title {q(title)}"

entries = [key(hexrgb(families["F"][0]), "forward (dark to light: microbatch)"),
           key(hexrgb(families["B"][0]), "backward (dark to light: microbatch)"),
           key("#cfcfcf", "waiting for a neighbour"),
           key("#9a9a9a", "waiting for the last sends", "fs pattern 4 border lc rgb '#9a9a9a'"),
           "NaN with lines lc rgb 'black' lw 1.5 title 'end of the step'"]
w("plot " + ", ".join(entries))
with open(script, "w") as f:
    f.write("\n".join(gp) + "\n")
PY

if ! gnuplot "$work/plot.gp" 2> "$work/gnuplot.err" || [ ! -s "$out" ]; then
  cat "$work/gnuplot.err" >&2
  echo "plot-pipeline: gnuplot could not draw $out (its messages above)" >&2
  exit 1
fi
echo "wrote $out"
