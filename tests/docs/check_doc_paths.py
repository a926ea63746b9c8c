#!/usr/bin/env python3
"""Every repository path that README.md, configs/README.md and docs/*.md cite exists.

    check_doc_paths.py REPO_ROOT

A cited path is a token that starts with one of the repository's top-level folders
(`src/...`, `tests/...`, `docs/...`, ...), or a source file named from its layer (`nn/precision.h`,
`train/step_traffic.h`: it must exist under include/wallfacer/, src/, kernels/, models/ or tests/).
Both lists are read from the tree, so a new folder is covered. Shell-style forms are understood:
`kernels/cpu/gemm.{h,cpp}` must have both files, `configs/*.yaml` and `tests/<layer>/` (a
placeholder) must match at least one. Folders that builds and runs write (build*/, data/, runs/)
are not the repository's and are skipped.
Also, README.md names every file of scripts/ (its folder table lists them), so a new script
cannot go unmentioned. Exits 1 listing each missing path with the file and line that cite it.
"""
import glob
import os
import re
import sys

# Written by builds and runs (see .gitignore), so a doc may cite them before they exist.
GENERATED = ("build", "data", "runs", ".cache")


def top_level_folders(root):
    names = []
    for name in sorted(os.listdir(root)):
        if not os.path.isdir(os.path.join(root, name)) or name.startswith("build"):
            continue
        if name in GENERATED or (name.startswith(".") and name != ".ci"):
            continue
        names.append(name)
    return names


def expand_braces(path):
    """`a.{h,cpp}` -> [`a.h`, `a.cpp`] (one level per brace group, left to right)."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    head, tail = path[: match.start()], path[match.end():]
    return [p for part in match.group(1).split(",") for p in expand_braces(head + part + tail)]


# Where a path named from its layer ("nn/precision.h") may live.
LAYER_BASES = ("include/wallfacer", "src", "kernels", "models", "tests")


def layer_folders(root):
    names = set()
    for base in LAYER_BASES:
        folder = os.path.join(root, base)
        names.update(n for n in os.listdir(folder) if os.path.isdir(os.path.join(folder, n)))
    return sorted(names)


def cited_paths(text, folders, layers):
    """(line number, path, bases to look under) of every cited path."""
    # A path starts after something that is not part of a path (so not inside a URL or another
    # path) and runs over path characters, braces, globs and <placeholders>.
    def alternatives(names):
        return "|".join(re.escape(n) for n in names)
    rooted = re.compile(r"(?<![\w./-])((?:%s)/[\w./*{},<>-]*)" % alternatives(folders))
    # Layer-relative: source files only, so that "data/kjv.txt" (written by a run) is not one.
    by_layer = re.compile(r"(?<![\w./-])((?:%s)/[\w./{},-]*\.(?:h|cpp|\{h,cpp\}))(?![\w.])" % alternatives(layers))
    for number, line in enumerate(text.splitlines(), 1):
        for match in rooted.finditer(line):
            yield number, match.group(1).rstrip(".,:"), ("",)
        for match in by_layer.finditer(line):
            if match.group(1).split("/")[0] not in folders:
                yield number, match.group(1), LAYER_BASES


def exists(root, path, bases):
    def under(base):
        for variant in expand_braces(path):
            wildcard = re.sub(r"<[^<>]*>", "*", variant)
            if not glob.glob(os.path.join(root, base, wildcard)):
                return False
        return True
    return any(under(base) for base in bases)


def main():
    if len(sys.argv) != 2:
        print("usage: check_doc_paths.py REPO_ROOT", file=sys.stderr)
        return 2
    root = sys.argv[1]
    folders, layers = top_level_folders(root), layer_folders(root)
    docs = ["README.md", "configs/README.md"] + sorted(
        os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    missing, checked = [], 0
    for doc in docs:
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            text = f.read()
        for number, path, bases in cited_paths(text, folders, layers):
            checked += 1
            if not exists(root, path, bases):
                missing.append(f"{doc}:{number}: {path}")
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    scripts = sorted(n for n in os.listdir(os.path.join(root, "scripts"))
                     if os.path.isfile(os.path.join(root, "scripts", n)))
    unnamed = [n for n in scripts if n not in readme]
    if unnamed:
        missing.append("README.md: names no " + ", ".join(f"scripts/{n}" for n in unnamed)
                       + " (the folder table lists every script)")
    if missing:
        print(f"{len(missing)} problem(s): cited paths that do not exist (moved or renamed? fix the doc), "
              "or scripts README.md does not name:")
        print("\n".join("  " + m for m in missing))
        return 1
    print(f"all {checked} cited paths exist in {len(docs)} documents")
    return 0


if __name__ == "__main__":
    sys.exit(main())
