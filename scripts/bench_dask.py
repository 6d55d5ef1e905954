#!/usr/bin/python3
"""scripts/bench_dask.py - the Dask and NumPy peers of the foundation benchmark
(scripts/bench.sh).

Usage: /usr/bin/python3 scripts/bench_dask.py N CHUNK REPS

Runs with Debian's /usr/bin/python3 (python3-numpy, python3-dask), not with a
python3 found first on PATH.  Builds N x N float32 arrays A and B (fixed
seeds) in memory, wraps them as dask arrays with chunks (CHUNK, CHUNK) and
persists them, so only the matrix product is timed.  After one untimed
warm-up of each, it prints per rep, interleaved:
    dask N SECONDS      (A @ B).compute(scheduler='threads')
    numpy N SECONDS     numpy.matmul(a, b)
Times are time.perf_counter() wall-clock seconds.  The dask result is
checked against numpy's (max abs error <= 1e-3 * max |C|); on a mismatch
the script prints the error on stderr and exits 1 without reporting times.
"""
import sys
import time

import dask
import dask.array as da
import numpy as np


def main():
    if len(sys.argv) != 4:
        sys.stderr.write("usage: bench_dask.py N CHUNK REPS\n")
        return 2
    n, chunk, reps = (int(x) for x in sys.argv[1:])
    if n <= 0 or chunk <= 0 or reps <= 0:
        sys.stderr.write("bench_dask.py: N, CHUNK and REPS must be positive\n")
        return 2

    rng = np.random.default_rng(12345)
    a = rng.uniform(-1.0, 1.0, size=(n, n)).astype(np.float32)
    b = rng.uniform(-1.0, 1.0, size=(n, n)).astype(np.float32)
    A = da.from_array(a, chunks=(chunk, chunk)).persist(scheduler="threads")
    B = da.from_array(b, chunks=(chunk, chunk)).persist(scheduler="threads")

    # Warm-ups (untimed) and the correctness check.
    ref = np.matmul(a, b)
    got = (A @ B).compute(scheduler="threads")
    if got.shape != ref.shape or got.dtype != np.float32:
        sys.stderr.write("bench_dask.py: dask result has shape %s dtype %s\n"
                         % (got.shape, got.dtype))
        return 1
    err = float(np.max(np.abs(got - ref)))
    scale = float(np.max(np.abs(ref)))
    if not np.isfinite(err) or err > 1e-3 * scale:
        sys.stderr.write("bench_dask.py: dask result differs from numpy: "
                         "max abs error %g, max |C| %g\n" % (err, scale))
        return 1
    sys.stderr.write("bench_dask.py: dask == numpy within %.3g (max |C| %.3g); "
                     "dask %s numpy %s\n"
                     % (err, scale, dask.__version__, np.__version__))
    del got, ref

    for _ in range(reps):
        t0 = time.perf_counter()
        c = (A @ B).compute(scheduler="threads")
        t = time.perf_counter() - t0
        print("dask %d %.6f" % (n, t), flush=True)
        del c
        t0 = time.perf_counter()
        c = np.matmul(a, b)
        t = time.perf_counter() - t0
        print("numpy %d %.6f" % (n, t), flush=True)
        del c
    return 0


if __name__ == "__main__":
    sys.exit(main())
