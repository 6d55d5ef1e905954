#!/usr/bin/env python3
"""Random kills against stored data (run by kill_random.sh).

Three `tradb --worker` processes on loopback (or, with `local`, the
shell's own three local workers), replication 2.  Each round pipes a
script of updates (products, in-place updates, maps, each reading what
earlier ones wrote) into a shell and, at a random moment, kills one
worker with SIGKILL (a remote one is then restarted; a local one is
started again by the next shell), stalls one (SIGSTOP, then SIGCONT
0.3-4 s later: within the shell's 1.5 s window of silence before it
counts a worker down, or past it, while statements run or while the
shell closes), or kills the shell itself.  Afterwards every tensor, read by a
new shell, must be
  - after a worker's death or stall: exactly what replaying the
    statements the shell reports as done gives (a failed statement
    leaves its output's previous version; the others run on the
    survivors, or wait for the stalled worker), or, when the
    shell stopped (a local worker killed before it answered the shell's
    first message), the state after some prefix of the script;
  - after the shell's death: the state after some prefix of the script
    (statements commit whole and in order).
Usage: kill_random.py TRADB WORKDIR [SEEDS [ROUNDS [local]]]
"""
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np

TRADB, WORK = sys.argv[1], sys.argv[2]
NSEEDS = int(sys.argv[3]) if len(sys.argv) > 3 else 2
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 3
LOCAL = len(sys.argv) > 5 and sys.argv[5] == "local"

# statement, and what it makes from the current values
UPDATES = [
    ("C[i,j] = A[i,k] * B[k,j];", lambda v: ("C", v["A"] @ v["B"])),
    ("A[i,k] = A[i,k] * 0.5 + D[i,k];", lambda v: ("A", v["A"] * 0.5 + v["D"])),
    ("D[i,k] = tanh(SUM(C[i,j] * B[k,j]));", lambda v: ("D", np.tanh(v["C"] @ v["B"].T))),
    ("B[k,j] = B[k,j] - 0.01 * SUM(A[i,k] * C[i,j]);", lambda v: ("B", v["B"] - 0.01 * (v["A"].T @ v["C"]))),
    ("C[i,j] = relu(C[i,j]) - 0.5;", lambda v: ("C", np.maximum(v["C"], 0) - 0.5)),
]


def free_port():
    """A loopback port below the kernel's own range: free_port.py's."""
    here = os.path.dirname(os.path.abspath(__file__))
    return int(subprocess.check_output([sys.executable, os.path.join(here, "free_port.py")]))


class Workers:
    def __init__(self, d):
        self.d, self.procs = d, [None] * 3
        self.eps = ["tcp://127.0.0.1:%d" % free_port() for _ in range(3)]
        for n in range(3):
            self.start(n)

    def log(self, n):
        return os.path.join(self.d, "w%d.log" % n)

    def start(self, n):
        """Start worker n and wait (with a deadline) until it listens."""
        before = open(self.log(n)).read().count("listening") if os.path.exists(self.log(n)) else 0
        with open(self.log(n), "a") as log:
            self.procs[n] = subprocess.Popen(
                [TRADB, "--worker", "--listen", self.eps[n], "--data", os.path.join(self.d, "w%d" % n),
                 "--threads", "1"], stdout=log, stderr=log)
        deadline = time.time() + 20
        while open(self.log(n)).read().count("listening") <= before:
            if self.procs[n].poll() is not None or time.time() > deadline:
                sys.exit("kill_random: FAIL: worker %d did not start:\n%s" % (n, open(self.log(n)).read()[-2000:]))
            time.sleep(0.05)

    def kill(self, n):
        self.procs[n].send_signal(signal.SIGKILL)
        self.procs[n].wait()

    def stop(self):
        for p in self.procs:
            if p and p.poll() is None:
                p.kill()
                p.wait()


def stall(pid, pause):
    """Stop process pid now and continue it PAUSE s later; the thread
    that continues it (join it), or None if pid is gone already."""
    if not signal_if_alive(pid, signal.SIGSTOP):
        return None

    def cont():
        time.sleep(pause)  # the length of the stall, not a wait for a state
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:  # stopped and gone with its shell
            pass
    t = threading.Thread(target=cont)
    t.start()
    return t


def signal_if_alive(pid, sig):
    """Send sig to pid; whether it was still there (a local worker found
    by pgrep may have exited with its shell, its script done, since)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def same(a, b):
    return a.shape == b.shape and np.allclose(a, b, rtol=1e-9, atol=1e-9 * max(1.0, float(np.abs(b).max())))


def run_seed(seed):
    rng, nrng = random.Random(seed), np.random.default_rng(seed)
    d = os.path.join(WORK, "s%d" % seed)
    os.makedirs(d)
    ws = None if LOCAL else Workers(d)
    where = ["--local-workers", "3"] if LOCAL else ["--workers", ",".join(ws.eps)]
    cmd = [TRADB] + where + [os.path.join(d, "db")]
    try:
        # one seed in three large enough for chunks of 256 KiB and more,
        # which workers write past the page cache (O_DIRECT)
        big = rng.random() < 1 / 3
        I, K, J = rng.choice([64, 130] if not big else [384, 520]), rng.choice(
            [48, 100] if not big else [256, 400]), rng.choice([32, 64] if not big else [128, 320])
        shapes = {"A": (I, K), "B": (K, J), "C": (I, J), "D": (I, K)}
        vals = {}
        setup = ["SET replication = 2;", "SET synchronous = %s;" % rng.choice(["normal", "full"])]
        for t, sh in shapes.items():
            vals[t] = nrng.uniform(-1, 1, sh)
            np.save(os.path.join(d, t + ".npy"), vals[t])
            ch = [rng.choice([n, n // 2, max(1, n // 3), rng.randint(1, n)]) for n in sh]
            setup.append("LOAD %s FROM '%s/%s.npy' CHUNK [%s] TYPE f64;" % (t, d, t, ", ".join(map(str, ch))))
        r = subprocess.run(cmd, input="\n".join(setup) + "\n", capture_output=True, text=True, timeout=120)
        if r.returncode:
            return ["seed %d: set-up failed: %s" % (seed, r.stdout + r.stderr)]
        bad = []
        for rnd in range(ROUNDS):
            seq = [rng.choice(UPDATES) for _ in range(12)]
            victim, delay, whom = rng.randrange(3), rng.uniform(0.0, 0.6), rng.choice(["worker", "shell", "stall"])
            pause = rng.uniform(0.3, 4.0)
            sh = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
            sh.stdin.write("\n".join(s for s, _ in seq) + "\n")
            sh.stdin.close()
            sh.stdin = None  # written whole: communicate() below only reads
            time.sleep(delay)  # the moment of the kill, not a wait for a state
            resume = None
            if whom != "shell" and LOCAL:
                kids = subprocess.run(["pgrep", "-P", str(sh.pid)], capture_output=True, text=True).stdout.split()
                if kids:  # none yet: the shell has not started them
                    pid = int(kids[victim % len(kids)])
                    if whom == "worker":
                        signal_if_alive(pid, signal.SIGKILL)
                    else:
                        resume = stall(pid, pause)
            elif whom == "stall":
                resume = stall(ws.procs[victim].pid, pause)
            elif whom == "worker":
                ws.kill(victim)
            else:
                sh.send_signal(signal.SIGKILL)
            try:  # its output ends when every holder of it has exited
                out = sh.communicate(timeout=120)[0]
            except subprocess.TimeoutExpired:
                sh.kill()
                bad.append("seed %d round %d: the shell's output did not end within 120 s of its last "
                           "statement or its death (a process outlived it holding its stdout?)" % (seed, rnd))
                break
            finally:
                if resume:  # continued before the check's session
                    resume.join()
            failed = {int(m) for m in re.findall(r"^line (\d+): (?!warning: )", out, re.M)}  # not a warning
            states = [dict(vals)]
            for i, (_, make) in enumerate(seq):
                if i + 1 not in failed:
                    t, v = make(vals)
                    vals[t] = v
                states.append(dict(vals))
            if whom == "worker" and not LOCAL:
                ws.start(victim)
            if whom != "shell" and not re.search(r"^Error:", out, re.M):
                states = states[-1:]  # the shell ran every statement
            saves = ["SAVE %s TO '%s/out_%s.npy';" % (t, d, t) for t in shapes]
            chk = subprocess.run(cmd, input="\n".join(saves) + "\n", capture_output=True, text=True, timeout=120)
            got = {}
            for t in shapes:
                f = os.path.join(d, "out_%s.npy" % t)
                if os.path.exists(f):
                    got[t] = np.load(f)
                    os.unlink(f)
            match = [m for m, st in enumerate(states) if all(t in got and same(got[t], st[t]) for t in shapes)]
            what = ("worker %d stalled %.1f s after %.2f s" % (victim, pause, delay) if whom == "stall" else
                    "%s killed after %.2f s" % ("worker %d" % victim if whom == "worker" else "the shell", delay))
            if not match:
                bad.append("seed %d round %d (%s, %d statements failed): stored values match no replay\n%s%s%s"
                           % (seed, rnd, what, len(failed), out, chk.stdout, chk.stderr))
                break
            vals = dict(states[match[-1]])
            print("ok   seed %d round %d: %s, %d statements failed" % (seed, rnd, what, len(failed)))
        return bad
    finally:
        if ws:
            ws.stop()


def main():
    bad = []
    for seed in range(1, NSEEDS + 1):
        bad += run_seed(seed)
    for b in bad:
        print("FAIL " + b)
    print("kill_random: %d seeds, %d wrong" % (NSEEDS, len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
