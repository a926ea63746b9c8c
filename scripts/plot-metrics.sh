#!/usr/bin/env bash
# Draws the loss and throughput curves of a training run to PNG.
#
#   scripts/plot-metrics.sh runs/gpt-tiny/metrics.jsonl [OUT_DIR]
#
# Reads the JSON lines `wallfacer train` writes (<log.dir>/metrics.jsonl) and writes
# OUT_DIR/loss.png (train loss, and validation loss where logged, per step) and
# OUT_DIR/throughput.png (tokens/s and model FLOP utilisation per step). OUT_DIR defaults to the
# metrics file's directory. Uses gnuplot (Debian: gnuplot-nox) when installed, else Debian's
# matplotlib (python3-matplotlib, through /usr/bin/python3).
set -euo pipefail

if [ "$#" -lt 1 ] || [ ! -f "$1" ]; then
  echo "usage: scripts/plot-metrics.sh METRICS.jsonl [OUT_DIR]  (got: ${1:-nothing}; is it <log.dir>/metrics.jsonl?)" >&2
  exit 2
fi
metrics="$1"
out_dir="${2:-$(dirname "$metrics")}"
mkdir -p "$out_dir"

# One whitespace-separated table: step loss val_loss tokens_per_s mfu ("NaN" where absent), so
# both plotters read the same columns.
table="$(mktemp)"
trap 'rm -f "$table"' EXIT
/usr/bin/python3 - "$metrics" > "$table" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if not line:
        continue
    m = json.loads(line)
    def col(key):
        v = m.get(key)
        return "NaN" if v is None else repr(float(v))
    print(m["step"], col("loss"), col("val_loss"), col("tokens_per_s"), col("mfu"))
PY
if [ ! -s "$table" ]; then
  echo "plot-metrics: $metrics has no metrics lines yet" >&2
  exit 1
fi

if command -v gnuplot > /dev/null; then
  gnuplot <<GP
set terminal pngcairo size 900,500 noenhanced
set datafile missing "NaN"
set grid
set xlabel "step"
set output "$out_dir/loss.png"
set ylabel "loss (nats/token)"
plot "$table" using 1:2 with lines title "train", "" using 1:3 with linespoints title "validation"
set output "$out_dir/throughput.png"
set ylabel "tokens/s"
set y2label "MFU"
set y2tics
plot "$table" using 1:4 with lines axes x1y1 title "tokens/s", "" using 1:5 with lines axes x1y2 title "MFU"
GP
elif /usr/bin/python3 -c "import matplotlib" 2> /dev/null; then
  /usr/bin/python3 - "$table" "$out_dir" <<'PY'
import sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = [[float(x) for x in line.split()] for line in open(sys.argv[1])]
step, loss, val, tps, mfu = (list(c) for c in zip(*rows))
fig, ax = plt.subplots(figsize=(9, 5))
ax.plot(step, loss, label="train")
vs = [(s, v) for s, v in zip(step, val) if v == v]
if vs:
    ax.plot(*zip(*vs), "o-", label="validation")
ax.set_xlabel("step"); ax.set_ylabel("loss (nats/token)"); ax.grid(True); ax.legend()
fig.savefig(sys.argv[2] + "/loss.png", dpi=100)
fig, ax = plt.subplots(figsize=(9, 5))
ax.plot(step, tps, label="tokens/s"); ax.set_xlabel("step"); ax.set_ylabel("tokens/s"); ax.grid(True)
ax2 = ax.twinx(); ax2.plot(step, mfu, color="tab:orange", label="MFU"); ax2.set_ylabel("MFU")
fig.savefig(sys.argv[2] + "/throughput.png", dpi=100)
PY
else
  echo "plot-metrics: needs gnuplot (apt-get install gnuplot-nox) or matplotlib (apt-get install python3-matplotlib)" >&2
  exit 1
fi
echo "wrote $out_dir/loss.png and $out_dir/throughput.png"
