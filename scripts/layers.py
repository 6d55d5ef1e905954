#!/usr/bin/env python3
"""Check tradb's layering from its object files (nm): no file calls into a
file that calls back into it (no cycle of calls between files), and no
folder calls into a folder above it.

  scripts/layers.py [-v] [BUILDDIR]  (default: the current directory; -v
                                     lists every file's callees)

Prints each file's callees by folder and exits 1 on a cycle or an upward
call.  Run after `make`; `make check` runs it (tests/build/layers.sh).
"""
import os, subprocess, sys

# Lowest first: a folder may call only into itself and folders before it.
ORDER = ["util", "kernels", "catalog", "net", "parse", "layout", "compile", "optimize",
         "sched", "exec", "dist", "worker", "engine", "shell"]

def objects(top):
    for folder in ORDER:
        d = os.path.join(top, folder)
        if not os.path.isdir(d):
            continue
        for f in sorted(os.listdir(d)):
            src = f[:-2].split("-", 1)[-1] + ".c"
            # an object whose source is gone is a leftover of an older tree
            if f.endswith(".o") and (os.path.exists(os.path.join(d, src)) or
                                     os.path.exists(os.path.join(d, src + "u"))):
                yield folder, os.path.join(d, f)

def source_name(folder, obj):
    base = os.path.basename(obj)[:-2]
    if "-" in base:  # per-target objects: tradb-shell.o
        base = base.split("-", 1)[1]
    return folder + "/" + base

def main():
    args = [a for a in sys.argv[1:] if a != "-v"]
    top = args[0] if args else "."
    defined, used, folder_of = {}, {}, {}
    for folder, obj in objects(top):
        name = source_name(folder, obj)
        folder_of[name] = folder
        out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout
        used[name] = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            sym, kind = parts[0], parts[1]
            if kind == "U":
                used[name].add(sym)
            elif kind in "TDBRC" and sym not in ("main",):
                defined.setdefault(sym, name)
    calls = {f: sorted({defined[s] for s in syms if s in defined and defined[s] != f})
             for f, syms in used.items()}
    bad = 0
    rank = {f: i for i, f in enumerate(ORDER)}
    for f, callees in sorted(calls.items()):
        for g in callees:
            if rank[folder_of[g]] > rank[folder_of[f]]:
                print(f"upward call: {f} -> {g}")
                bad = 1
    # cycles: Tarjan's strongly connected components
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1
        stack.append(v); on.add(v)
        for w in calls.get(v, []):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in sorted(calls):
        if v not in index:
            visit(v)
    for comp in comps:
        print("cycle of calls: " + " <-> ".join(comp))
        bad = 1
    if "-v" in sys.argv:
        for f, callees in sorted(calls.items()):
            print(f"{f}: {' '.join(callees)}")
    print(f"layers: {len(calls)} files, {'FAIL' if bad else 'ok'}")
    return bad

sys.exit(main())
