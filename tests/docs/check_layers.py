#!/usr/bin/env python3
"""Every #include of the library and the executable follows the layer order of docs/architecture.md.

    check_layers.py REPO_ROOT            exits 1 listing each include that breaks a rule
    check_layers.py REPO_ROOT --graph    prints which layer includes which (the measured graph)

The order is read from docs/architecture.md alone, so the page and the check cannot drift: the
rows of the first table under "## Layers" are the layers, top (included by everything) first,
and each row's backticked paths (`include/wallfacer/core`, `src/core`, ...) say which files are
that layer's. The rules:
  - a file includes only its own layer and the layers above it (never a layer below: "upward");
  - a public header (include/) includes only public headers: it is installed, src/, kernels/
    and models/ are not;
  - every file under include/, src/, kernels/ and models/ belongs to a row (a new folder needs one).
The table under "### Upward includes allowed" lists the few exceptions, one file and one
include each, with the reason; an exception that no longer matches an include is an error too,
so the list only shrinks.

A backend's own kernels are private to it. The table under "### Backend internals" names each
such folder (`kernels/cpu`) and the folder of the code that may use it (`kernels`); everything else
reaches them through the kernel seam (kernels/backend.h). A file outside that folder that includes
one of them, or names its namespace (`kernels::cpu::`), breaks the rule, unless the table under
"### Backend internals used directly" lists the file with the reason (that list only shrinks too). An include is resolved as the compiler does (next to the file, then
include/, then the repository root); one that names no file of the tree (a system header, the
build_info.h CMake writes into the build tree) belongs to no layer and is not checked.
"""
import collections
import os
import re
import sys

DOC = "docs/architecture.md"
SCANNED = ("include", "src", "kernels", "models")
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
CODE = re.compile(r"`([^`]+)`")


class TableError(Exception):
    pass


def table_after(lines, heading):
    """The cells of the first markdown table after the line `heading`, header row left out."""
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == heading)
    except StopIteration:
        raise TableError(f"{DOC} has no '{heading}' heading") from None
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    if len(rows) < 3:
        raise TableError(f"{DOC}: no table under '{heading}'")
    return rows[2:]  # header and |---| rows


def read_rules(root):
    """(layers in order, {path prefix: layer}, {(file, include): reason})."""
    with open(os.path.join(root, DOC), encoding="utf-8") as f:
        lines = f.read().splitlines()
    layers, where = [], {}
    for row in table_after(lines, "## Layers"):
        name = row[0].strip("`")
        layers.append(name)
        for path in CODE.findall(row[1]):
            where[path.rstrip("/")] = name
    exceptions = {}
    for row in table_after(lines, "### Upward includes allowed"):
        files, includes = CODE.findall(row[0]), CODE.findall(row[1])
        if len(files) != 1 or len(includes) != 1 or len(row) < 3 or not row[2]:
            raise TableError(f"{DOC}: an exception row names one `file`, one `include` and why: {'|'.join(row)}")
        exceptions[(files[0], includes[0])] = row[2]
    return layers, where, exceptions


def read_private(root):
    """([(private folder, namespace, owner folder)], {file allowed to use them: why})."""
    with open(os.path.join(root, DOC), encoding="utf-8") as f:
        lines = f.read().splitlines()
    private = []
    for row in table_after(lines, "### Backend internals"):
        cells = [CODE.findall(cell) for cell in row[:3]]
        if len(row) < 3 or any(len(c) != 1 for c in cells):
            raise TableError(f"{DOC}: a backend-internals row names one `folder`, one `namespace` and one "
                             f"`owner folder`: {'|'.join(row)}")
        private.append((cells[0][0].rstrip("/"), cells[1][0], cells[2][0].rstrip("/")))
    allowed = {}
    for row in table_after(lines, "### Backend internals used directly"):
        files = CODE.findall(row[0])
        if len(files) != 1 or len(row) < 2 or not row[1]:
            raise TableError(f"{DOC}: a row of backend internals used directly names one `file` and why: "
                             f"{'|'.join(row)}")
        allowed[files[0]] = row[1]
    return private, allowed


def inside(path, folder):
    return path == folder or path.startswith(folder + "/")


def check_private(root):
    """Uses of a backend's own kernels outside the code that owns them."""
    private, allowed = read_private(root)
    unused = dict(allowed)
    problems = []
    for source in sources(root):
        with open(os.path.join(root, source), encoding="utf-8", errors="replace") as f:
            text = f.read().splitlines()
        for folder, namespace, owner in private:
            if inside(source, owner):
                continue
            uses = [(number, f"#include of {path}") for number, _, _, path in includes(root, source)
                    if path and inside(path, folder)]
            uses += [(number, f"a call into {namespace}") for number, line in enumerate(text, 1)
                     if namespace + "::" in line.split("//")[0]]
            if not uses:
                continue
            if source in allowed:
                unused.pop(source, None)
                continue
            for number, what in uses:
                problems.append(f"{source}:{number}: {what}: {folder} is private to {owner}; go through the "
                                "kernel seam (kernels/backend.h: ops::kernels_for(...) in src/ops, or an op), or "
                                "list the file under '### Backend internals used directly' with the reason")
    for source in unused:
        problems.append(f"{DOC}: `{source}` is listed under '### Backend internals used directly' but uses none: "
                        "remove its row")
    return problems


def layer_of(path, where):
    """The layer whose longest listed path holds `path` (repository-relative), or None."""
    best = None
    for prefix, name in where.items():
        if path == prefix or path.startswith(prefix + "/"):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, name)
    return best[1] if best else None


def resolve(root, source, quote, included):
    """The repository-relative path an include names, or None where it names no file of the tree."""
    bases = ([os.path.dirname(source)] if quote == '"' else []) + ["include", ""]
    for base in bases:
        path = os.path.normpath(os.path.join(base, included))
        if not path.startswith("..") and os.path.isfile(os.path.join(root, path)):
            return path
    return None


def sources(root):
    for top in SCANNED:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.relpath(os.path.join(folder, name), root)


def includes(root, source):
    """(line number, include as written, quote, resolved path or None) of each #include."""
    with open(os.path.join(root, source), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            match = INCLUDE.match(line)
            if match:
                quote, included = match.groups()
                yield number, included, quote, resolve(root, source, quote, included)


def check(root):
    """(problems, graph {layer: Counter(included layer)})."""
    layers, where, exceptions = read_rules(root)
    rank = {name: i for i, name in enumerate(layers)}
    unused = dict(exceptions)
    problems, graph = [], collections.defaultdict(collections.Counter)
    for source in sources(root):
        layer = layer_of(source, where)
        if layer is None:
            problems.append(f"{source}: belongs to no layer: add its folder to a row of the table under "
                            f"'## Layers' in {DOC}")
            continue
        for number, included, quote, path in includes(root, source):
            target = layer_of(path, where) if path else None
            if target is None:
                continue
            spelled = f"#include {quote}{included}{'>' if quote == '<' else quote}"
            if source.startswith("include/") and not path.startswith("include/"):
                problems.append(f"{source}:{number}: {spelled}: a public header includes {path}, which is not "
                                "installed: only include/ headers may be included from include/")
            if target != layer:
                graph[layer][target] += 1
            if rank[target] <= rank[layer]:
                continue
            if (source, included) in exceptions:
                unused.pop((source, included), None)
                continue
            problems.append(f"{source}:{number}: {spelled}: upward include: {layer} includes only itself and "
                            f"the layers above it in the table of {DOC}, and {target} is below {layer}. Move what "
                            f"{layer} needs into {layer} or a layer above it, or list this include under "
                            "'### Upward includes allowed' with the reason")
    for (source, included) in unused:
        problems.append(f"{DOC}: the exception `{source}` -> `{included}` matches no upward include any more: "
                        "remove its row")
    return problems + check_private(root), graph


def main():
    args = sys.argv[1:]
    if len(args) not in (1, 2) or (len(args) == 2 and args[1] != "--graph"):
        print("usage: check_layers.py REPO_ROOT [--graph]", file=sys.stderr)
        return 2
    root = args[0]
    try:
        problems, graph = check(root)
    except TableError as e:
        print(e)
        return 1
    if len(args) == 2:
        for layer in read_rules(root)[0]:
            used = ", ".join(f"{name} ({count})" for name, count in sorted(graph[layer].items()))
            print(f"{layer} includes: {used or 'nothing else'}")
    if problems:
        print(f"{len(problems)} include(s) break the layer order of {DOC}:")
        print("\n".join("  " + p for p in problems))
        return 1
    print(f"every include of {', '.join(SCANNED)} follows the layer order of {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
