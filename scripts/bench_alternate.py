#!/usr/bin/env python3
"""One `make bench` workload, tradb and a peer a pass each in turn.

    scripts/bench_alternate.py WORKLOAD [--tradb ./tradb] [--peer torch|numpy]
                               [--passes 10] [--workers N] [--tag TAG]
                               [--session 'ARGS' ...]

The suite (scripts/bench.sh) runs each system's passes together, round
by round; on a shared machine whose speed drifts from one minute to the
next, a system can then meet a slower minute than its peer.  Here one
embedded tradb session (its local workers, as `tradb DB` starts them)
stays open beside the peer, which runs in this process on the same
inputs (tradb's FILL, saved as .npy), and the two alternate pass by pass:
pass i of tradb, then pass i of the peer, so each pair meets the same
minute.  After one untimed pass each, --passes timed ones; prints each
system's pass times, their medians, the ratio of the medians and the
median of the pairs' ratios.  A tradb pass is the sum of its statements'
`Run Time` lines, a peer's its compute function timed as the suite times
it.  The peer's outputs are checked against tradb's.

Each --session ARGS opens one more tradb session, with ARGS added to its
command line (e.g. --session '--threads 1' --session ''): the sessions
take their passes in turn before the peer's, so two settings of tradb
meet the same minutes too.  ARGS may begin with the path of the tradb
binary the session runs (e.g. --session /tmp/before --session '': a
build before a change beside the one after it).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

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


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workload")
    ap.add_argument("--tradb", default="./tradb")
    ap.add_argument("--peer", choices=["torch", "numpy"], default="torch")
    ap.add_argument("--passes", type=int, default=10)
    ap.add_argument("--workers", type=int, default=0, help="local workers (0: tradb's default)")
    ap.add_argument("--tag", default=None, help="a variant of the workload, as in the suite")
    ap.add_argument("--session", action="append", metavar="ARGS",
                    help="a tradb session with ARGS added to its command line (repeatable; "
                    "default: one session, no ARGS)")
    a = ap.parse_args(argv)
    if a.passes < 1:
        ap.error("--passes must be positive")
    if not os.environ.get(S_REEXEC):
        os.environ[S_REEXEC] = bench.same_blas_kernels(os.path.abspath(a.tradb))
        os.execv(sys.executable, [sys.executable, os.path.abspath(__file__)] + argv)
    ws = {w.name: w for w in bench.workloads("default")}
    if a.workload not in ws or ws[a.workload].cold or ws[a.workload].pause:
        ap.error("WORKLOAD: one of " + ", ".join(n for n, w in ws.items() if not w.cold and not w.pause))
    w = ws[a.workload]
    extras = a.session or [""]
    d = tempfile.mkdtemp(prefix="bench-alternate-")
    ss = []
    try:
        cmd = [os.path.abspath(a.tradb)] + (["--local-workers", str(a.workers)] if a.workers else [])
        for i, extra in enumerate(extras):
            args = extra.split()
            binary = os.path.abspath(args.pop(0)) if args and not args[0].startswith("-") else cmd[0]
            ss.append(Session([binary] + cmd[1:] + args + ["%s/db%d" % (d, i)]))
            # every session FILLs the same values (the FILLs are seeded)
            ss[i].run(bench.setup_lines(w, a.tag) + [".timer on"])
        ss[0].run(["SAVE %s TO '%s/in-%s.npy';" % (n, d, n) for n in w.inputs()])
        v = {n: np.load("%s/in-%s.npy" % (d, n)) for n in w.inputs()}
        if a.peer == "torch":
            try:
                import torch
            except ImportError:
                print("cannot import torch (scripts/install-deps.sh installs python3-torch)")
                return 1
            torch.set_num_threads(os.cpu_count())
            ops, pv = bench.TorchOps(torch), {n: torch.from_numpy(x) for n, x in v.items()}
        else:
            ops, pv = bench.NumpyOps, v
        stmts = bench.form_stmts(w, a.tag)

        def tradb_pass(s):
            out = s.run(stmts)
            return sum(float(x) for x in re.findall(r"Run Time: real ([0-9.]+)", out))

        def peer_pass():
            t0 = time.perf_counter()
            outs = w.compute(pv, ops)
            return time.perf_counter() - t0, outs

        for s in ss:
            tradb_pass(s)
        _, outs = peer_pass()
        for i, s in enumerate(ss):
            s.run(["SAVE %s TO '%s/out%d-%s.npy';" % (n, d, i, n) for n in w.outputs])
            for n in w.outputs:
                ok, err = bench.check(np.load("%s/out%d-%s.npy" % (d, i, n)).astype(np.float64),
                                      np.asarray(outs[n]))
                if not ok:
                    print("%s: the peer's %s differs from tradb's (%s)" % (a.workload, n, err))
                    return 1
        tts, pt = [[] for _ in ss], []
        for _ in range(a.passes):
            for s, tt in zip(ss, tts):
                tt.append(tradb_pass(s))
            pt.append(peer_pass()[0])
    finally:
        for s in ss:
            s.close()  # the shell ends at end of input, its local workers with it
        shutil.rmtree(d, ignore_errors=True)
    print("%s, %d passes each, alternating (load %s, OpenBLAS kernels %s)" % (
        a.workload, a.passes, bench.loadavg(), os.environ[S_REEXEC]))
    names = ["tradb" + (" " + e.strip() if e.strip() else "") for e in extras]
    for name, xs in list(zip(names, tts)) + [(a.peer, pt)]:
        print("  %-6s median %.3f s  [%s]" % (name, statistics.median(xs), " ".join("%.3f" % x for x in xs)))
    for name, tt in zip(names, tts):
        print("  %s / %s: %.2f (medians), %.2f (median of the pairs)" % (
            name, a.peer, statistics.median(tt) / statistics.median(pt),
            statistics.median([x / y for x, y in zip(tt, pt)])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
