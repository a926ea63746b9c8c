#!/usr/bin/env python3
"""check_layers.py catches what it exists to catch: on a copy of the repository's sources and
docs/architecture.md, each planted break (an upward include, a public header including a private
one, a file in no layer, a stale exception, a missing table, a use of the CPU backend's own kernels
from outside it) fails it with the file, the line, the
include and the rule; the unplanted copy passes.

    check_layers_test.py REPO_ROOT
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "check_layers.py")
COPIED = ("docs/architecture.md", "include", "src", "kernels", "models")


def copy_tree(root, into):
    for path in COPIED:
        source, target = os.path.join(root, path), os.path.join(into, path)
        if os.path.isdir(source):
            shutil.copytree(source, target)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy(source, target)


def run(tree):
    result = subprocess.run([sys.executable, CHECK, tree], capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def write(tree, path, text):
    os.makedirs(os.path.dirname(os.path.join(tree, path)), exist_ok=True)
    with open(os.path.join(tree, path), "w", encoding="utf-8") as f:
        f.write(text)


def edit_doc(tree, old, new):
    path = os.path.join(tree, "docs/architecture.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert old in text, f"docs/architecture.md no longer holds {old!r}: update this test"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new))


def move_row_below(tree, layer, other):
    path = os.path.join(tree, "docs/architecture.md")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    row = next(i for i, line in enumerate(lines) if line.startswith(f"| {layer} |"))
    moved = lines.pop(row)
    lines.insert(next(i for i, line in enumerate(lines) if line.startswith(f"| {other} |")) + 1, moved)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


# The one exception the table holds today.
EXCEPTION = "| `src/core/host_copy.cpp` | `kernels/cpu/parallel_for.h` |"

# (name, how to break the copy, text the failure must hold)
CASES = [
    ("upward include from core to train",
     lambda t: write(t, "src/core/planted.cpp", '#include <vector>\n\n#include "wallfacer/train/trainer.h"\n'),
     ['src/core/planted.cpp:3: #include "wallfacer/train/trainer.h": upward include: core includes only itself '
      "and the layers above it", "train is below core"]),
    ("upward include of a private header, from a public one",
     lambda t: write(t, "include/wallfacer/nn/planted.h",
                     '#pragma once\n#include "src/parallel/sp_strategy_base.h"\n'),
     ['include/wallfacer/nn/planted.h:2: #include "src/parallel/sp_strategy_base.h": a public header includes',
      "only include/ headers may be included from include/",
      'include/wallfacer/nn/planted.h:2: #include "src/parallel/sp_strategy_base.h": upward include: nn',
      "parallel is below nn"]),
    ("angle-bracket include from kernels to models",
     lambda t: write(t, "kernels/cpu/planted.cpp", "#include <wallfacer/models/model.h>\n"),
     ["kernels/cpu/planted.cpp:1: #include <wallfacer/models/model.h>: upward include: kernels", "models is below"]),
    ("a file in no layer",
     lambda t: write(t, "src/planted/planted.cpp", "int x;\n"),
     ["src/planted/planted.cpp: belongs to no layer"]),
    ("a stale exception",
     lambda t: edit_doc(t, EXCEPTION, "| `src/core/host_copy.cpp` | `wallfacer/nn/module.h` | planted |\n" + EXCEPTION),
     ["the exception `src/core/host_copy.cpp` -> `wallfacer/nn/module.h` matches no upward include any more"]),
    ("an exception taken away",
     lambda t: edit_doc(t, EXCEPTION, "| `src/core/x.cpp` | `x.h` |"),
     ['src/core/host_copy.cpp:6: #include "kernels/cpu/parallel_for.h": upward include']),
    ("comm moved below parallel in the table",
     lambda t: move_row_below(t, "comm", "parallel"),
     ["upward include: parallel includes only itself", "comm is below parallel"]),
    ("a call into the CPU kernels from parallel",
     lambda t: write(t, "src/parallel/planted.cpp", "void f() { wf::kernels::cpu::scale<float>(0, 1.f, 0, 0); }\n"),
     ["src/parallel/planted.cpp:1: a call into kernels::cpu: kernels/cpu is private to kernels",
      "go through the kernel seam"]),
    ("an include of the CPU kernels from ops",
     lambda t: write(t, "src/ops/planted.cpp", '#include "kernels/cpu/gemm.h"\n'),
     ["src/ops/planted.cpp:1: #include of kernels/cpu/gemm.h: kernels/cpu is private to kernels"]),
    ("a stale direct use of backend internals",
     lambda t: edit_doc(t, "| `src/cli/info_command.cpp` |", "| `src/nn/module.cpp` | planted |\n| `src/cli/info_command.cpp` |"),
     ["`src/nn/module.cpp` is listed under '### Backend internals used directly' but uses none"]),
    ("no table",
     lambda t: edit_doc(t, "## Layers", "## Layering"),
     ["docs/architecture.md has no '## Layers' heading"]),
]


def main():
    if len(sys.argv) != 2:
        print("usage: check_layers_test.py REPO_ROOT", file=sys.stderr)
        return 2
    root, failures = sys.argv[1], []
    with tempfile.TemporaryDirectory() as scratch:
        clean = os.path.join(scratch, "clean")
        copy_tree(root, clean)
        code, output = run(clean)
        if code != 0:
            failures.append(f"the unplanted copy fails (exit {code}):\n{output}")
        for number, (name, plant, expected) in enumerate(CASES):
            tree = os.path.join(scratch, f"case{number}")
            shutil.copytree(clean, tree)
            plant(tree)
            code, output = run(tree)
            missing = [text for text in expected if text not in output]
            if code != 1 or missing:
                failures.append(f"{name}: exit {code}, wanted 1 with {missing}; output:\n{output}")
            else:
                print(f"ok: {name}")
    if failures:
        print("\n".join(failures))
        return 1
    print(f"all {len(CASES)} planted breaks fail the check")
    return 0


if __name__ == "__main__":
    sys.exit(main())
