#!/usr/bin/env python3
"""Compares the losses two training runs logged in their metrics.jsonl, step by step.

  compare_losses.py RUN.jsonl REFERENCE.jsonl TOLERANCE STEPS [--labels RUN_NAME REFERENCE_NAME]

Passes (exit 0) when both logged the same STEPS steps, every loss and gradient norm is finite in both
(metrics.jsonl writes a non-finite number as null), and every loss of RUN is within TOLERANCE of
REFERENCE's, relative to REFERENCE's. Prints one line either way: the worst relative difference and
its step, the run's first and last loss beside the reference's last, the gradient norms' largest
relative difference (printed, not bounded: they follow the losses); then what failed. Exit 1 when
they differ, 2 when a file cannot be read.

Used by tests/train/device_parity_tolerance.sh (a device against the CPU) and scripts/device-check.sh
(sp 4 on four processes against one).
"""
import argparse
import json
import math
import sys


def read_steps(path):
    """{step: row} of the rows that log a training step (rows without a loss, if any, are not steps)."""
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        print(f"cannot read {path}: {e}")
        sys.exit(2)
    return {row["step"]: row for row in rows if "step" in row and "loss" in row}


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def relative(x, reference):
    return abs(x - reference) / max(abs(reference), 1e-30)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run")
    parser.add_argument("reference")
    parser.add_argument("tolerance", type=float)
    parser.add_argument("steps", type=int)
    parser.add_argument("--labels", nargs=2, default=("the run", "the reference"), metavar=("RUN", "REFERENCE"))
    args = parser.parse_args()
    name, ref_name = args.labels
    run, ref = read_steps(args.run), read_steps(args.reference)
    problems = []
    if len(run) != args.steps or sorted(run) != sorted(ref):
        problems.append(f"{len(run)} steps logged by {name}, {len(ref)} by {ref_name}; {args.steps} expected")
    common = sorted(set(run) & set(ref))
    bad = sorted(s for s in common for row in (run[s], ref[s])
                 if not (finite(row.get("loss")) and finite(row.get("grad_norm"))))
    if bad:
        problems.append(f"a loss or gradient norm not finite at step{'s' if len(bad) > 1 else ''} "
                        f"{', '.join(map(str, dict.fromkeys(bad)))}")
    good = [s for s in common if s not in bad]
    if not good:
        print("no comparable steps; " + "; ".join(problems))
        return 1
    loss = {s: relative(run[s]["loss"], ref[s]["loss"]) for s in good}
    worst = max(good, key=loss.get)
    norm = max(relative(run[s]["grad_norm"], ref[s]["grad_norm"]) for s in good)
    if loss[worst] > args.tolerance:
        problems.append(f"step {worst}: loss {run[worst]['loss']!r} by {name}, {ref[worst]['loss']!r} by {ref_name}")
    first, last = good[0], good[-1]
    detail = (f"losses {loss[worst]:.1e} apart at most (relative; bound {args.tolerance:g}; at step {worst}), "
              f"{run[first]['loss']:.4f} -> {run[last]['loss']:.6f} by {name} vs {ref[last]['loss']:.6f}; "
              f"gradient norms {norm:.1e} apart at most")
    print(detail + ("; FAIL: " + "; ".join(problems) if problems else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
