#!/usr/bin/env bash
# scripts/bench.sh - tradb's foundation benchmark: the chunked matrix product
#     C[i,j] = A[i,k] * B[k,j]
# on N x N f32 tensors with C x C chunks, against peers measured in the same
# run on the same cores:
#     openblas-sgemm  one cblas_sgemm call (scripts/bench_sgemm.c)
#     numpy           numpy.matmul             (scripts/bench_dask.py)
#     dask-threads    dask.array A @ B, threaded scheduler, same chunks
# The requirement: tradb <= 1.25x openblas-sgemm, and tradb < dask-threads.
#
# Usage: scripts/bench.sh [--size N] [--chunk C] [--reps R] [--rounds K]
#   defaults: N 4096, C 1024, R 5, K 3.  `make bench BENCH_ARGS='...'`.
# Environment:
#   TRADB         the tradb binary (default ./tradb in the current directory)
#   BENCH_PYTHON  python with numpy and dask (default /usr/bin/python3)
#   TMPDIR        where the scratch database goes (default /tmp)
#   OPENBLAS_NUM_THREADS  respected by the sgemm peer (default: all cores)
#
# What is timed.  tradb: one tradb process creates and fills A and B in a
# persistent database (untimed); then per round ONE tradb process runs the
# assignment once as a warm-up and R more times with `.timer on`; each
# statement's own "Run Time: real" is a sample (process start-up and the
# warm-up are not counted).  sgemm: one warm-up call, then R timed calls.
# dask/numpy: arrays built and persisted in memory, one warm-up each, then R
# timed calls each.  A round runs sgemm, tradb, dask+numpy in turn; K rounds
# are run and every sample is kept; the table reports medians.
#
# Correctness.  tradb's A, B and each round's C are saved as .npy files and
# C is compared with numpy's A @ B (max abs error <= 1e-3 * max |C|); the
# dask peer checks itself against numpy the same way.  On any mismatch no
# time is reported and the script exits 1.
#
# Output: the table on stdout, and bench-out/results.md (with the date, nproc,
# CPU model and command); raw samples in bench-out/samples.txt.  bench-out/
# is created in the current directory (the build directory under make), as
# is bench-out/bench_sgemm, built here with gcc and pkg-config openblas.
set -euo pipefail
export LC_ALL=C

usage() {
  echo "usage: $0 [--size N] [--chunk C] [--reps R] [--rounds K]" >&2
  exit 2
}

size=4096
chunk=1024
reps=5
rounds=3
cmdline="$0 $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --size) [ $# -ge 2 ] || usage; size=$2; shift 2 ;;
    --chunk) [ $# -ge 2 ] || usage; chunk=$2; shift 2 ;;
    --reps) [ $# -ge 2 ] || usage; reps=$2; shift 2 ;;
    --rounds) [ $# -ge 2 ] || usage; rounds=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "bench.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
for v in "$size" "$chunk" "$reps" "$rounds"; do
  case "$v" in
    ''|*[!0-9]*|0) echo "bench.sh: '$v' is not a positive integer" >&2; usage ;;
  esac
done

srcdir=$(cd "$(dirname "$0")/.." && pwd)
outdir=$PWD/bench-out
tradb=${TRADB:-./tradb}
python=${BENCH_PYTHON:-/usr/bin/python3}

die() { echo "bench.sh: $*" >&2; exit 1; }

[ -x "$tradb" ] || die "no tradb binary at '$tradb' (set TRADB or run make)"
tradb=$(cd "$(dirname "$tradb")" && pwd)/$(basename "$tradb")
"$python" -c 'import numpy, dask.array' 2>/dev/null ||
  die "$python cannot import numpy and dask (install python3-numpy python3-dask, or set BENCH_PYTHON)"
command -v pkg-config >/dev/null || die "pkg-config not found"
pkg-config --exists openblas || die "pkg-config does not know openblas (install libopenblas-dev)"

mkdir -p "$outdir"
rm -f "$outdir/results.md" # never leave a stale table behind
sgemm_bin=$outdir/bench_sgemm
# shellcheck disable=SC2046  # pkg-config output is meant to be split
gcc -O2 -o "$sgemm_bin" "$srcdir/scripts/bench_sgemm.c" \
  $(pkg-config --cflags --libs openblas) || die "building bench_sgemm failed"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/tradb-bench.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
db=$scratch/db
samples=$outdir/samples.txt
: >"$samples"
log=$outdir/bench.log
: >"$log"

load0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "bench.sh: C[i,j] = A[i,k] * B[k,j], N=$size, chunk=$chunk, reps=$reps, rounds=$rounds" >&2
echo "bench.sh: scratch $scratch, log $log" >&2

# ---- setup: A and B in a persistent database ------------------------------
cat >"$scratch/setup.tql" <<EOF
CREATE TENSOR A[$size, $size] CHUNK [$chunk, $chunk] TYPE f32;
FILL A UNIFORM(-1, 1) SEED 1;
CREATE TENSOR B[$size, $size] CHUNK [$chunk, $chunk] TYPE f32;
FILL B UNIFORM(-1, 1) SEED 2;
SAVE A TO '$scratch/a.npy';
SAVE B TO '$scratch/b.npy';
EOF
"$tradb" --bail "$db" <"$scratch/setup.tql" >>"$log" 2>&1 ||
  die "tradb setup failed (see $log)"
# The same tensors in a database served by ONE local worker using every
# core: the single-site baseline that the embedded default (one local worker
# per core, chunks moved between them) is measured against.
db1=$scratch/db1
tradb1=("$tradb" --local-workers 1 --threads "$(nproc)")
grep -v '^SAVE' "$scratch/setup.tql" | "${tradb1[@]}" --bail "$db1" >>"$log" 2>&1 ||
  die "tradb (one worker) setup failed (see $log)"

# ---- the rounds -------------------------------------------------------------
# shellcheck disable=SC2094  # both appends to the log, nothing reads it
run_sgemm() {
  "$sgemm_bin" "$size" "$reps" 2>>"$log" | tee -a "$log" |
    awk '$1 == "sgemm" { print "openblas-sgemm", $3 }' >>"$samples" ||
    die "bench_sgemm failed (see $log)"
}

run_tradb() { # $1: round number, $2: system name, $3: database, rest: tradb command
  local round=$1 name=$2 dbdir=$3 n
  shift 3
  local script=$scratch/$name$round.tql out=$scratch/$name$round.out
  {
    echo ".timer on"
    for ((i = 0; i <= reps; i++)); do echo "C[i,j] = A[i,k] * B[k,j];"; done
    echo ".timer off"
    echo "SAVE C TO '$scratch/$name-c$round.npy';"
  } >"$script"
  "$@" --bail "$dbdir" <"$script" >"$out" 2>>"$log" ||
    { cat "$out" >>"$log"; die "$name failed in round $round (see $log)"; }
  cat "$out" >>"$log"
  n=$(grep -c '^Run Time: real ' "$out" || true)
  [ "$n" -eq $((reps + 1)) ] ||
    die "round $round: expected $((reps + 1)) 'Run Time' lines from $name, got $n"
  # the first statement is the warm-up
  awk -v s="$name" '/^Run Time: real / { if (seen++) print s, $4 }' "$out" >>"$samples"
}

# shellcheck disable=SC2094
run_dask() {
  "$python" "$srcdir/scripts/bench_dask.py" "$size" "$chunk" "$reps" 2>>"$log" |
    tee -a "$log" |
    awk '$1 == "dask" { print "dask-threads", $3 } $1 == "numpy" { print "numpy", $3 }' \
      >>"$samples" || die "bench_dask.py failed (see $log)"
}

for ((r = 1; r <= rounds; r++)); do
  echo "bench.sh: round $r/$rounds: sgemm" >&2
  run_sgemm
  echo "bench.sh: round $r/$rounds: tradb" >&2
  run_tradb "$r" tradb "$db" "$tradb"
  echo "bench.sh: round $r/$rounds: tradb, one worker" >&2
  run_tradb "$r" tradb-1worker "$db1" "${tradb1[@]}"
  echo "bench.sh: round $r/$rounds: dask, numpy" >&2
  run_dask
done

# ---- correctness of tradb's C ----------------------------------------------
echo "bench.sh: checking tradb's C against numpy" >&2
"$python" - "$scratch" "$rounds" "$size" >>"$log" 2>&1 <<'EOF' ||
import sys
import numpy as np
d, rounds, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
a = np.load(d + "/a.npy")
b = np.load(d + "/b.npy")
assert a.shape == (n, n) and b.shape == (n, n), (a.shape, b.shape)
assert a.dtype == np.float32 and b.dtype == np.float32, (a.dtype, b.dtype)
ref = np.matmul(a, b)
scale = float(np.max(np.abs(ref)))
ok = True
for r, name in [(r, name) for r in range(1, rounds + 1) for name in ("tradb", "tradb-1worker")]:
    c = np.load("%s/%s-c%d.npy" % (d, name, r))
    if c.shape != ref.shape or c.dtype != np.float32:
        print("round %d: C has shape %s dtype %s" % (r, c.shape, c.dtype))
        ok = False
        continue
    err = float(np.max(np.abs(c.astype(np.float64) - ref)))
    good = np.isfinite(err) and err <= 1e-3 * scale
    print("round %d: %s C vs numpy: max abs error %.3g, max |C| %.3g: %s"
          % (r, name, err, scale, "ok" if good else "WRONG"))
    ok = ok and good
sys.exit(0 if ok else 1)
EOF
  { tail -n $((2 * rounds)) "$log" >&2; die "tradb's C is wrong: no times reported"; }
tail -n $((2 * rounds)) "$log" >&2

# ---- the table --------------------------------------------------------------
median() { # $1: system name -> "MEDIAN COUNT" (empty if no samples)
  awk -v s="$1" '$1 == s { print $2 }' "$samples" | sort -g |
    awk '{ v[NR] = $1 } END {
      if (NR == 0) exit
      m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "%.6f %d\n", m, NR }'
}
want=$((reps * rounds))
for s in tradb tradb-1worker openblas-sgemm numpy dask-threads; do
  got=$(awk -v s="$s" '$1 == s' "$samples" | wc -l)
  [ "$got" -eq "$want" ] || die "expected $want samples for $s, got $got (see $log)"
done
read -r t_tradb n_tradb < <(median tradb)
read -r t_one n_one < <(median tradb-1worker)
read -r t_sgemm n_sgemm < <(median openblas-sgemm)
read -r t_numpy n_numpy < <(median numpy)
read -r t_dask n_dask < <(median dask-threads)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
verdict() { # $1 ratio, $2 limit, $3 "le" | "lt"
  awk -v r="$1" -v l="$2" -v op="$3" 'BEGIN {
    ok = op == "le" ? r <= l : r < l; print ok ? "PASS" : "FAIL" }'
}
r_sgemm=$(ratio "$t_tradb" "$t_sgemm")
r_dask=$(ratio "$t_tradb" "$t_dask")
r_numpy=$(ratio "$t_tradb" "$t_numpy")
r_one=$(ratio "$t_tradb" "$t_one")
v_one=$(verdict "$r_one" 1.15 le)
r1_sgemm=$(ratio "$t_one" "$t_sgemm")
r1_dask=$(ratio "$t_one" "$t_dask")
v1_sgemm=$(verdict "$r1_sgemm" 1.25 le)
v1_dask=$(verdict "$r1_dask" 1 lt)
v_sgemm=$(verdict "$r_sgemm" 1.25 le)
v_dask=$(verdict "$r_dask" 1 lt)

load1=$(cut -d' ' -f1-3 /proc/loadavg)
cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
ver=$("$tradb" --version 2>/dev/null | paste -sd ' ' || true)
{
  echo "## Foundation benchmark: \`C[i,j] = A[i,k] * B[k,j]\`"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- machine: nproc $(nproc), CPU: ${cpu:-unknown}"
  echo "- tradb: ${ver:-unknown}"
  echo "- command: \`$cmdline\`"
  echo "- load average (1/5/15 min) at start: $load0; at end: $load1" \
    "(other work on the machine slows every system, unevenly)"
  echo "- $reps timed reps per system per round, $rounds rounds interleaved" \
    "(sgemm, tradb, dask+numpy); medians over all samples; f32, A and B uniform(-1, 1)"
  echo
  echo "| workload | size | system | median s | runs | tradb/peer |"
  echo "|---|---|---|---|---|---|"
  w='C[i,j] = A[i,k] * B[k,j]'
  echo "| $w | ${size}x${size} | openblas-sgemm | $(printf %.3f "$t_sgemm") | $n_sgemm | $r_sgemm |"
  echo "| $w | ${size}x${size}, chunk ${chunk} | tradb ($(nproc) local workers) | $(printf %.3f "$t_tradb") | $n_tradb | 1.00 |"
  echo "| $w | ${size}x${size}, chunk ${chunk} | tradb (1 local worker, $(nproc) threads) | $(printf %.3f "$t_one") | $n_one | $r_one |"
  echo "| $w | ${size}x${size} | numpy | $(printf %.3f "$t_numpy") | $n_numpy | $r_numpy |"
  echo "| $w | ${size}x${size}, chunk ${chunk} | dask-threads | $(printf %.3f "$t_dask") | $n_dask | $r_dask |"
  echo
  echo "- **tradb/sgemm = $r_sgemm** with $(nproc) local workers, **$r1_sgemm** with one" \
    "(foundation requirement <= 1.25): $v_sgemm, $v1_sgemm"
  echo "- **tradb/dask = $r_dask** with $(nproc) local workers, **$r1_dask** with one" \
    "(foundation requirement < 1): $v_dask, $v1_dask"
  echo "- **tradb ($(nproc) workers) / tradb (1 worker) = $r_one** (distributed requirement <= 1.15): $v_one"
  echo "- correctness: tradb's C matches numpy's A @ B (max abs error <= 1e-3 * max |C|) in every round"
} >"$outdir/results.md"
cat "$outdir/results.md"
echo >&2
echo "bench.sh: table written to $outdir/results.md, samples in $samples" >&2
