#!/usr/bin/env python3
"""The tables of scripts/device-check.sh (docs/gpu.md), from what its phases left in WORK:

    python3 scripts/device_check_tables.py WORK OUT DRY COMMIT

  - OUT/table.md: the bench phase (WORK/bench/{wallfacer,pytorch}.jsonl): each measurement's wallfacer
    and PyTorch numbers and their ratio;
  - OUT/speed-table.md, when the speed phase ran (WORK/speed/{wallfacer,pytorch}.jsonl): issue 31's
    targets, each with the measured numbers, the ratio, the target and PASS / MISS (n/a: not measured);
  - OUT/results.json: the phases' results and every measured number.
Both tables start with the date, commit, GPU, driver and library versions (nvidia-smi, `wallfacer
info`, the libraries, PyTorch's), as docs/gpu.md keeps them. Each is printed too.
"""
import csv
import datetime
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

# bf16 dense tensor-core peak of an H200 SXM (NVIDIA's datasheet: 1979 TFLOP/s with sparsity), the
# MFU denominator unless WF_SPEED_PEAK_TFLOPS says otherwise.
H200_BF16_TFLOPS = 989.4


def jsonl(path):
    try:
        return [json.loads(line) for line in open(path) if line.strip().startswith("{")]
    except OSError:
        return []


def pick(rows, bench, **match):
    return next((r for r in rows if r.get("bench") == bench and all(r.get(k) == v for k, v in match.items())), None)


def pairs(ours, theirs, bench, keys):
    """(ours, theirs) rows of `bench` with equal `keys`, each measured case once, in the order measured
    (ours first); a side that did not measure a case gives None."""
    seen = []
    for r in ours + theirs:
        if r.get("bench") == bench and (key := {k: r.get(k) for k in keys}) not in seen:
            seen.append(key)
            yield pick(ours, bench, **key), pick(theirs, bench, **key)


def cell(r, key, fmt):
    return fmt.format(r[key]) if r and r.get(key) is not None else "n/a"


def ratio_of(a, b, key, faster_is_larger):
    """wallfacer's speed over PyTorch's from a key of each row, or None."""
    if not (a and b and a.get(key) and b.get(key)):
        return None
    return a[key] / b[key] if faster_is_larger else b[key] / a[key]


def ratio(a, b, key, faster_is_larger):
    r = ratio_of(a, b, key, faster_is_larger)
    return "n/a" if r is None else f"{r:.2f}"


def header(work, dry, commit, theirs, what):
    """The title and the versions line of a table."""
    versions = pick(theirs, "versions") or {}
    try:
        info = json.load(open(f"{work}/info.json"))
    except (OSError, ValueError):
        info = {}
    cuda = info.get("cuda", {}) if isinstance(info.get("cuda"), dict) else {}
    try:
        smi = next(csv.reader(open(f"{work}/nvidia-smi.csv").read().splitlines()[1:2]), [])
    except OSError:
        smi = []
    libs = {}
    if os.path.exists(f"{work}/libraries.txt"):
        for line in open(f"{work}/libraries.txt"):
            name, _, rest = line.partition(": ")
            libs[name] = rest.split(" (")[0].strip()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = f"### {what}, {now}, commit {commit}"
    if dry == "1":
        title += " (DRY RUN: CPU, toy sizes; not GPU numbers)"
    gpu = (smi[0].strip() if smi else versions.get("gpu", "n/a")) + (", " + smi[2].strip() if len(smi) > 2 else "")
    driver = smi[1].strip() if len(smi) > 1 else cuda.get("driver") or "n/a"
    torch = (f"PyTorch {versions.get('torch', 'n/a')} (CUDA {versions.get('cuda', 'n/a')}, "
             f"cuDNN {versions.get('cudnn', 'n/a')}, NCCL {versions.get('nccl', 'n/a')})")
    libraries = "; ".join(f"{k} {v}" for k, v in libs.items())
    lines = [title, "", f"GPU: {gpu}; driver {driver}; {libraries}; {torch}"]
    return lines, {"date": now, "info": info, "libraries": libs}


def bench_table(work, dry, commit):
    ours, theirs = jsonl(f"{work}/bench/wallfacer.jsonl"), jsonl(f"{work}/bench/pytorch.jsonl")
    g_o, g_t = pick(ours, "gemm"), pick(theirs, "gemm")
    a_o, a_t = pick(ours, "attention"), pick(theirs, "attention")
    rows = []
    if g_t or g_o:
        n = (g_o or g_t)["M"]
        rows.append((f"bf16 GEMM {n}x{n}x{n}: TFLOP/s", cell(g_o, "tflops", "{:.4g}"), cell(g_t, "tflops", "{:.4g}"),
                     ratio(g_o, g_t, "tflops", True)))
    if a_t or a_o:
        r = a_o or a_t
        rows.append((f"attention fwd+bwd, causal, bf16, B {r['batch']} x {r['tokens']} tokens x {r['heads']} heads x d "
                     f"{r['head_dim']}: TFLOP/s (ms)",
                     f"{cell(a_o, 'tflops', '{:.4g}')} ({cell(a_o, 'ms', '{:.3g}')})",
                     f"{cell(a_t, 'tflops', '{:.4g}')} ({cell(a_t, 'ms', '{:.3g}')})", ratio(a_o, a_t, "tflops", True)))
    for model in ("gpt-tiny", "gpt2-124m"):
        o, t = pick(ours, "gpt", model=model), pick(theirs, "gpt", model=model)
        r = o or t
        if r:
            rows.append((f"{model} training step, {r['dtype']}, B {r['batch']} x T {r['seq']}: ms",
                         cell(o, "ms_per_step", "{:.4g}"), cell(t, "ms_per_step", "{:.4g}"),
                         ratio(o, t, "ms_per_step", False)))
    lines, meta = header(work, dry, commit, theirs, "Device check")
    lines += ["", "| measurement | wallfacer | PyTorch | wallfacer speed / PyTorch's |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    if not rows:
        lines.append("| (no measurement finished) | | | |")
    return "\n".join(lines) + "\n", meta, ours, theirs


# ---- speed (issue 31) ----------------------------------------------------------------------------

def gpt_parameters(r):
    """Parameters of our GPT (layer norms with biases, Linear biases, GELU MLP d_ff = 4·d, tied
    embeddings, rotary positions: no position table), from a row's shape."""
    L, d, V = r["layers"], r["d_model"], r["vocab"]
    ff = 4 * d
    block = (d * 3 * d + 3 * d) + (d * d + d) + (d * ff + ff) + (ff * d + d) + 4 * d
    return V * d + L * block + 2 * d


def gpt_flops_per_token(r, parameters):
    """Model FLOPs of one trained token: 6·N (forward 2·N, backward 4·N) plus causal attention's
    6·L·T·d (forward: q·kᵀ and p·v over T/2 keys on average, 2·T·d per layer; backward twice that).
    Recomputation (activation checkpoints) is not counted."""
    return 6.0 * parameters + 6.0 * r["layers"] * r["seq"] * r["d_model"]


def verdict(value, target, larger_is_better=True):
    if value is None:
        return "n/a"
    return "PASS" if (value >= target if larger_is_better else value <= target) else "MISS"


def gib(x):
    return f"{x / 2**30:.1f} GiB" if x else "n/a"


def speed_table(work, dry, commit):
    ours, theirs = jsonl(f"{work}/speed/wallfacer.jsonl"), jsonl(f"{work}/speed/pytorch.jsonl")
    peak = float(os.environ.get("WF_SPEED_PEAK_TFLOPS", H200_BF16_TFLOPS))
    rows = []  # (target, measurement, wallfacer, PyTorch, ratio, goal, verdict)

    square = next((r for r in ours + theirs if r.get("bench") == "gemm" and r["M"] == r["N"] == r["K"]), None)
    if square:
        n = square["M"]
        o, t = pick(ours, "gemm", M=n, N=n, K=n), pick(theirs, "gemm", M=n, N=n, K=n)
        rows.append(("1, 2", f"bf16 GEMM {n}x{n}x{n}, TFLOP/s (the rate attention is judged beside)",
                     cell(o, "tflops", "{:.4g}"), cell(t, "tflops", "{:.4g}"), ratio(o, t, "tflops", True), "", ""))
    for w, t in pairs(ours, theirs, "attention", ("batch", "tokens", "heads", "kv_heads", "head_dim", "causal")):
        r = w or t
        gqa = f", GQA {r['heads']}:{r['kv_heads']}" if r["kv_heads"] != r["heads"] else ""
        backend = (t or {}).get("op", "").partition("(")[2].rstrip(")") or "n/a"
        ran = f"; fwd {w['forward_by']}, bwd {w['backward_by']}" if w and "forward_by" in w else ""
        rows.append(("1", f"attention fwd+bwd {'causal' if r['causal'] else 'full'}, B {r['batch']} x N "
                     f"{r['tokens']} x H {r['heads']}{gqa}, d {r['head_dim']}: TFLOP/s (ms)",
                     f"{cell(w, 'tflops', '{:.4g}')} ({cell(w, 'ms', '{:.3g}')}{ran})",
                     f"{cell(t, 'tflops', '{:.4g}')} ({cell(t, 'ms', '{:.3g}')}; {backend})",
                     ratio(w, t, "tflops", True), ">= 1.0", verdict(ratio_of(w, t, "tflops", True), 1.0)))
    # WF_SPEED_GEMM_NAMES: "qkv:MxNxK out:MxNxK ...", the model's names of the shapes.
    names = dict(reversed(s.split(":", 1)) for s in os.environ.get("WF_SPEED_GEMM_NAMES", "").split() if ":" in s)
    for w, t in pairs(ours, theirs, "gemm", ("M", "N", "K")):
        r = w or t
        if r is square or r["M"] == r["N"] == r["K"]:
            continue
        label = names.get(f"{r['M']}x{r['N']}x{r['K']}", "")
        rows.append(("2", f"GEMM {label + ' ' if label else ''}{r['M']}x{r['N']}x{r['K']}: TFLOP/s",
                     cell(w, "tflops", "{:.4g}"), cell(t, "tflops", "{:.4g}"), ratio(w, t, "tflops", True), ">= 0.95",
                     verdict(ratio_of(w, t, "tflops", True), 0.95)))

    for w, t in pairs(ours, theirs, "gpt", ("model",)):
        r = w or t
        shape = {k: r[k] for k in ("layers", "d_model", "vocab", "seq")}
        n = (t or {}).get("parameters") or gpt_parameters(shape)
        flops = gpt_flops_per_token(shape, n)
        label = f"{r['model']} ({n:.3g} parameters), bf16, B {r['batch']} x T {r['seq']}"
        ckpt = f"; checkpoints: ours {(w or {}).get('checkpoint', 'n/a')}, PyTorch {(t or {}).get('checkpoint', 'n/a')}"
        rows.append(("3", f"{label}: tokens/s{ckpt}", cell(w, "tokens_per_s", "{:.4g}"),
                     cell(t, "tokens_per_s", "{:.4g}"), ratio(w, t, "tokens_per_s", True), ">= 1.1",
                     verdict(ratio_of(w, t, "tokens_per_s", True), 1.1)))
        mfu = {side: (x["tokens_per_s"] * flops / (peak * 1e12) if x and x.get("tokens_per_s") else None)
               for side, x in (("ours", w), ("theirs", t))}
        rows.append(("3", f"{label}: MFU (6·N + 6·L·T·d FLOPs per token over {peak:g} TFLOP/s)",
                     f"{100 * mfu['ours']:.1f}%" if mfu["ours"] is not None else "n/a",
                     f"{100 * mfu['theirs']:.1f}%" if mfu["theirs"] is not None else "n/a", "", ">= 50%",
                     verdict(mfu["ours"], 0.5)))
        mem = None
        if w and w.get("peak_mem_bytes") and t and t.get("peak_mem_bytes"):
            mem = w["peak_mem_bytes"] / t["peak_mem_bytes"]
        rows.append(("3", f"{label}: peak memory (ours: peak_mem_bytes; PyTorch: max_memory_allocated)",
                     gib((w or {}).get("peak_mem_bytes")), gib((t or {}).get("peak_mem_bytes")),
                     "n/a" if mem is None else f"{mem:.2f} (ours / PyTorch's)", "<= 1.0",
                     verdict(mem, 1.0, larger_is_better=False)))
    longest = pick(ours, "longest")
    if longest:
        rows.append(("3", f"longest sequence that trains one step ({longest.get('how', '')})",
                     str(longest.get("seq") or "none"), "", "", "", longest.get("why", "")))

    for w, t in pairs(ours, theirs, "dit", ("model",)):
        r = w or t
        per_s = {side: (1e3 * x["batch"] / x["ms_per_step"] if x and x.get("ms_per_step") else None)
                 for side, x in (("ours", w), ("theirs", t))}
        rows.append(("4", f"DiT-XL/2 training, bf16, {r['tokens']} patches, "
                     f"batch {r['batch']}: samples/s (peak memory ours {gib((w or {}).get('peak_mem_bytes'))}, "
                     f"PyTorch {gib((t or {}).get('peak_mem_bytes'))})",
                     "n/a" if per_s["ours"] is None else f"{per_s['ours']:.4g}",
                     "n/a" if per_s["theirs"] is None else f"{per_s['theirs']:.4g}",
                     ratio(w, t, "ms_per_step", False), "(reported)", ""))

    # train.cuda_graph: the same run eager and replaying its micro batch's graph (no PyTorch side).
    for eager in [r for r in ours if r.get("bench") == "graph" and r.get("graph") == "eager"]:
        captured = pick(ours, "graph", model=eager["model"], graph="captured")
        speedup = eager["ms_per_step"] / captured["ms_per_step"] if captured and captured.get("ms_per_step") else None
        failed = (captured or {}).get("failure")
        rows.append(("graph", f"train.cuda_graph, {eager['model']}, bf16, B {eager['batch']} x T {eager['seq']}: "
                     "ms/step eager, with the graph" + (f" (capture failed: {failed})" if failed else ""),
                     f"{cell(eager, 'ms_per_step', '{:.4g}')}, {cell(captured, 'ms_per_step', '{:.4g}')}", "",
                     "n/a" if speedup is None else f"{speedup:.3f} (eager / graph)", "> 1.0 turns it on", ""))

    calibrated = pick(ours, "calibrate")
    if calibrated:
        rows.append(("5", "`wallfacer tune --calibrate` wrote the cluster file", calibrated.get("file", "n/a"), "",
                     "", "written", "PASS" if calibrated.get("ok") else "MISS"))
    for p in [r for r in ours if r.get("bench") == "tune"]:
        measured = pick(ours, p["kind"], model=p["model"])
        got = measured["ms_per_step"] * 1e-3 if measured else None
        off = abs(p["step_s"] / got - 1) if got and p.get("step_s") else None
        rows.append(("5", f"tune's predicted step of {p['model']} vs its measured step: s",
                     f"{cell(p, 'step_s', '{:.4g}')} predicted, " + ("n/a" if got is None else f"{got:.4g} measured"),
                     "", "n/a" if off is None else f"{100 * off:.0f}% off", "within 15%",
                     verdict(off, 0.15, larger_is_better=False)))

    lines, meta = header(work, dry, commit, theirs, "GPU speed (issue 31)")
    lines += ["", "| target | measurement | wallfacer | PyTorch | ratio (wallfacer / PyTorch) | goal | verdict |",
              "|---|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    if not rows:
        lines.append("| | (no measurement finished) | | | | | |")
    judged = [r[6] for r in rows if r[6] in ("PASS", "MISS", "n/a") and r[5]]
    lines += ["", f"{judged.count('PASS')} PASS, {judged.count('MISS')} MISS, {judged.count('n/a')} not measured "
              f"(of {len(judged)} judged rows)"]
    return "\n".join(lines) + "\n", meta, ours, theirs


def main():
    work, out, dry, commit = sys.argv[1:5]
    text, meta, ours, theirs = bench_table(work, dry, commit)
    if ours or theirs or not os.path.isdir(f"{work}/speed"):  # not the bench's empty table in a speed-only run
        print(text)
        open(f"{out}/table.md", "w").write(text)
    results = [dict(zip(("status", "phase", "detail"), line.rstrip("\n").split("\t", 2)))
               for line in open(f"{work}/results.tsv")]
    everything = {"date": meta["date"], "commit": commit, "dry_run": dry == "1", "phases": results, "wallfacer": ours,
                  "pytorch": theirs, "info": meta["info"], "libraries": meta["libraries"]}
    if os.path.isdir(f"{work}/speed"):
        text, _, ours, theirs = speed_table(work, dry, commit)
        print(text)
        open(f"{out}/speed-table.md", "w").write(text)
        everything["speed"] = {"wallfacer": ours, "pytorch": theirs}
    json.dump(everything, open(f"{out}/results.json", "w"), indent=1)


if __name__ == "__main__":
    main()
