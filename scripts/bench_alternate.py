#!/usr/bin/env python3
"""`make bench` workloads, tradb and its peers a pass each in turn.

    scripts/bench_alternate.py WORKLOAD[,WORKLOAD...]|all [--tradb ./tradb]
                               [--peer torch|numpy|dask-threads|all ...]
                               [--passes 10] [--lead 1] [--workers N] [--tag TAG]
                               [--size default|large|small] [--session 'ARGS' ...]
                               [--set 'SET NAME = VALUE;' ...]

The suite (scripts/bench.sh) runs each system's passes together, round
by round; on a shared machine whose speed drifts from one minute to the
next, a system can then meet a slower minute than its peer.  Here one
embedded tradb session (its local workers, as `tradb DB` starts them)
stays open beside the peers, which run in this process on the same
inputs (tradb's FILL, saved as .npy), and they alternate pass by pass:
pass i of tradb, then pass i of each peer, so each pass meets the same
minute as the others of its turn.  Each timed pass comes right after
--lead untimed passes of its own system (default 1), so that every
system is timed back to back, as the suite times it: a pass that follows
another system's is slower, and by how much differs from system to
system (attention with --lead 0: NumPy 0.77 s, tradb 0.46 s a pass; with
--lead 1: 0.54 and 0.35 s).  After one untimed pass each, --passes timed
ones; prints each system's pass times, their medians, and for each
peer the ratio of the medians and the median of the pairs' ratios.  A
tradb pass is the sum of its statements' `Run Time` lines, a peer's its
compute function timed as the suite times it (Dask threads: the
workload's graph built anew on the persisted inputs, its persist timed,
as in the suite).  Every peer's outputs are checked against tradb's.

--peer may be given more than once (default: torch); `all` is NumPy,
PyTorch and Dask threads, the peers the suite's limit is set against.
WORKLOAD may be several, comma-separated, or `all` (every workload of
the suite that is neither a fresh session's first pass nor typed with
pauses): they run one after another, and with more than one workload or
peer a markdown table ends the output, with tradb over the fastest
peer of each workload.

Each --session ARGS opens one more tradb session, with ARGS added to its
command line (e.g. --session '--threads 1' --session ''): the sessions
take their passes in turn before the peers', so two settings of tradb
meet the same minutes too.  ARGS may begin with the path of the tradb
binary the session runs (e.g. --session /tmp/before --session '': a
build before a change beside the one after it).  Each --set statement
runs in every session before its set-up (e.g. --set 'SET synchronous =
full;').
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the workloads, their set-up and the peers' ops)
import numpy as np  # noqa: E402

# The peer runs on the OpenBLAS kernels tradb runs on (bench.same_blas_kernels):
# OPENBLAS_CORETYPE must be set before NumPy loads OpenBLAS, so once it is
# known the script starts again with it.
S_REEXEC = "BENCH_ALTERNATE_KERNELS_SET"


class Session:
    """A tradb shell on a pipe: each call sends lines and reads until a
    marker (an unknown dot command's error, printed in order)."""

    def __init__(self, cmd):
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, bufsize=1)

    def run(self, lines):
        self.p.stdin.write("\n".join(lines) + "\n.zz_bench_alternate_mark\n")
        self.p.stdin.flush()
        out = []
        for line in self.p.stdout:
            if "zz_bench_alternate_mark" in line:
                return "".join(out)
            out.append(line)
        raise RuntimeError("tradb ended:\n" + "".join(out[-20:]))

    def close(self):
        self.p.stdin.close()
        self.p.wait()


PEERS = ("numpy", "torch", "dask-threads")


def peer_pass_fn(name, w, v):
    """PEER's pass on inputs V (NumPy arrays): the suite's own peer
    function (bench.PY_PEER_FUNCS) with its timing loop replaced, so that
    this script calls the runs in turn with tradb's.  Returns (pass, the
    outputs of a first untimed run as NumPy arrays); pass() -> seconds."""
    runs = []

    def first_only(run):
        runs.append(run)
        return run()[0], []

    outs, _ = bench.PY_PEER_FUNCS[name](w, v, os.cpu_count(), first_only)
    return (lambda: runs[0]()[1]), {k: np.asarray(x) for k, x in outs.items()}


def ratios(times, t, p):
    """System t over system p: the ratio of their medians, and the median
    of the ratios of their passes taken in the same turn."""
    return (statistics.median(times[t]) / statistics.median(times[p]),
            statistics.median([x / y for x, y in zip(times[t], times[p])]))


def alternate(a, w, extras, names):
    """W's passes, tradb's sessions (ARGS extras, named names) and the
    peers in turn.  Returns {system: [seconds]} or an error text."""
    d = tempfile.mkdtemp(prefix="bench-alternate-")
    ss = []
    try:
        cmd = [os.path.abspath(a.tradb)] + (["--local-workers", str(a.workers)] if a.workers else [])
        for i, extra in enumerate(extras):
            args = extra.split()
            binary = os.path.abspath(args.pop(0)) if args and not args[0].startswith("-") else cmd[0]
            ss.append(Session([binary] + cmd[1:] + args + ["%s/db%d" % (d, i)]))
            # every session FILLs the same values (the FILLs are seeded)
            ss[i].run((a.set or []) + bench.setup_lines(w, a.tag) + [".timer on"])
        ss[0].run(["SAVE %s TO '%s/in-%s.npy';" % (n, d, n) for n in w.inputs()])
        v = {n: np.load("%s/in-%s.npy" % (d, n)) for n in w.inputs()}
        stmts = bench.form_stmts(w, a.tag)

        def tradb_pass(s):
            out = s.run(stmts)
            return sum(float(x) for x in re.findall(r"Run Time: real ([0-9.]+)", out))

        for s in ss:
            tradb_pass(s)
        for i, s in enumerate(ss):
            s.run(["SAVE %s TO '%s/out%d-%s.npy';" % (n, d, i, n) for n in w.outputs])
        peers = {}
        for name in a.peers:
            try:
                peers[name], outs = peer_pass_fn(name, w, v)
            except bench.Skip as e:
                return str(e)
            for i in range(len(ss)):
                for n in w.outputs:
                    ok, err = bench.check(np.load("%s/out%d-%s.npy" % (d, i, n)).astype(np.float64),
                                          np.asarray(outs[n]))
                    if not ok:
                        return "%s: %s's %s differs from tradb's (%s)" % (w.name, name, n, err)
        times = {n: [] for n in names + list(peers)}
        # Each timed pass right after --lead untimed ones of its own system:
        # a pass that follows the others' turns finds the memory its
        # process freed handed back to this virtual machine's host, and
        # its caches cold (NumPy's attention pass in one process: 0.50 s
        # back to back, 0.94 s a second apart), by more for some systems
        # than for others.
        for _ in range(a.passes):
            for s, n in zip(ss, names):
                for _ in range(a.lead):
                    tradb_pass(s)
                times[n].append(tradb_pass(s))
            for n, fn in peers.items():
                for _ in range(a.lead):
                    fn()
                times[n].append(fn())
        return times
    finally:
        for s in ss:
            s.close()  # the shell ends at end of input, its local workers with it
        shutil.rmtree(d, ignore_errors=True)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("workload", help="one or more, comma-separated, or 'all'")
    ap.add_argument("--tradb", default="./tradb")
    ap.add_argument("--peer", action="append", choices=PEERS + ("all",),
                    help="a peer (repeatable; default torch; all: %s)" % ", ".join(PEERS))
    ap.add_argument("--passes", type=int, default=10)
    ap.add_argument("--lead", type=int, default=1,
                    help="untimed passes of a system right before each of its timed ones "
                    "(default 1: each measured back to back, as the suite measures it)")
    ap.add_argument("--workers", type=int, default=0, help="local workers (0: tradb's default)")
    ap.add_argument("--tag", default=None, help="a variant of the workload, as in the suite")
    ap.add_argument("--size", choices=bench.SIZES, default="default",
                    help="the suite's sizes (small: a quick check of the harness, not a benchmark)")
    ap.add_argument("--set", action="append", metavar="STMT",
                    help="a statement every session runs before its set-up (repeatable)")
    ap.add_argument("--session", action="append", metavar="ARGS",
                    help="a tradb session with ARGS added to its command line (repeatable; "
                    "default: one session, no ARGS)")
    a = ap.parse_args(argv)
    if a.passes < 1:
        ap.error("--passes must be positive")
    if a.lead < 0:
        ap.error("--lead must be 0 or more")
    peers = a.peer or ["torch"]
    a.peers = [p for p in PEERS if p in peers or "all" in peers]
    ws = {w.name: w for w in bench.workloads(a.size)}
    eligible = [n for n, w in ws.items() if not w.cold and not w.pause]
    names = eligible if a.workload == "all" else a.workload.split(",")
    for n in names:
        if n not in eligible:
            ap.error("WORKLOAD: 'all' or one or more of " + ", ".join(eligible))
    if not os.environ.get(S_REEXEC):
        os.environ[S_REEXEC] = bench.same_blas_kernels(os.path.abspath(a.tradb))
        os.execv(sys.executable, [sys.executable, os.path.abspath(__file__)] + argv)
    extras = a.session or [""]
    tn = ["tradb" + (" " + e.strip() if e.strip() else "") for e in extras]
    rows, failed = [], 0
    for wname in names:
        times = alternate(a, ws[wname], extras, tn)
        if isinstance(times, str):
            print(times)
            failed = 1
            continue
        med = {n: statistics.median(xs) for n, xs in times.items()}
        print("%s, %d passes each, alternating (load %s, OpenBLAS kernels %s)" % (
            wname, a.passes, bench.loadavg(), os.environ[S_REEXEC]))
        for n, xs in times.items():
            print("  %-12s median %.3f s  [%s]" % (n, med[n], " ".join("%.3f" % x for x in xs)))
        for t in tn:
            for p in a.peers:
                print("  %s / %s: %.2f (medians), %.2f (median of the pairs)" % (
                    (t, p) + ratios(times, t, p)))
        fastest = min(a.peers, key=lambda p: med[p])
        rows.append((wname, [med[t] for t in tn], [med[p] for p in a.peers], fastest,
                     [ratios(times, t, fastest) for t in tn]))
        sys.stdout.flush()
    if len(names) > 1 or len(a.peers) > 1:
        print("\n| workload | %s | %s | fastest peer | %s |" % (
            " | ".join("%s s" % t for t in tn), " | ".join("%s s" % p for p in a.peers),
            " | ".join("%s / fastest (pairs)" % t for t in tn)))
        print("|---|" + "---:|" * (len(tn) + len(a.peers)) + "---|" + "---:|" * len(tn))
        for wname, tm, pm, fastest, rs in rows:
            print("| %s | %s | %s | %s | %s |" % (
                wname, " | ".join("%.3f" % x for x in tm), " | ".join("%.3f" % x for x in pm),
                fastest, " | ".join("%.2f (%.2f)" % r for r in rs)))
        within = sum(1 for r in rows if all(x[0] <= 1.10 for x in r[4]))
        print("\n%d of %d workloads within 1.10x of their fastest peer by the medians "
              "(the ratios before rounding)." % (
            within, len(rows)))
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
