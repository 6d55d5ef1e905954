#!/usr/bin/env bash
# OpenBLAS's kernels (README, "OpenBLAS's kernels").
# 1. An OPENBLAS_CORETYPE the user set is kept: `tradb --version` and the
#    local workers' logs name it.  With it set to OpenBLAS's generic SSE3
#    kernels (Prescott), which load a matrix's elements with aligned
#    vector loads, small f64 chunks LOADed from a file (sent to the
#    workers in ZeroMQ frames, which ZeroMQ places at any byte) give the
#    same values as the portable reference kernels.  (Before received
#    frames were copied when misaligned, a double at 4 mod 8 faulted in
#    dgemv and the worker died: "worker ... is down".)
# 2. Left unset, on a CPU that runs AVX2 and FMA, tradb runs none of
#    OpenBLAS's generic cores (Debian 12's OpenBLAS falls back to Prescott
#    on a CPU newer than it knows): its local workers (named the kernels
#    by their shell) and a worker started by hand (which starts itself
#    again with them) run the kernels `tradb --version` names.
# 3. OpenBLAS's idle threads spin for about 0.1 s after each call unless
#    OPENBLAS_THREAD_TIMEOUT says otherwise, on cores other workers need:
#    local workers and a worker started by hand run with it set (18), and
#    a value the user set is kept.
TEST=blas_kernels
source "$TOP_SRCDIR/tests/multi/lib.sh"

core() { sed -n 's/^OpenBLAS kernels: //p'; }
worker_cores() { sed -n 's/.*listening (.*OpenBLAS \([A-Za-z0-9]*\),.*/\1/p' "$1"/workers/w*.log | sort -u; }

got=$(OPENBLAS_CORETYPE=Prescott "$TRADB" --version | core)
[ "$got" = Prescott ] || fail "OPENBLAS_CORETYPE=Prescott: --version says '$got'"
ok

# small chunks of a 13 x 1 by 1 x 5 product, a 7 x 9 by 9 x 3 one and
# the 7 x 9 by a vector,
# made and saved by one session, loaded by the next
"$TRADB" --bail "$work/make" > "$work/make.out" 2>&1 <<SQL || { cat "$work/make.out"; fail "making the inputs"; }
CREATE TENSOR A[13, 1] TYPE f64; FILL A UNIFORM(-1, 1) SEED 1; SAVE A TO '$work/a.npy';
CREATE TENSOR B[1, 5] TYPE f64; FILL B UNIFORM(-1, 1) SEED 2; SAVE B TO '$work/b.npy';
CREATE TENSOR P[7, 9] TYPE f64; FILL P UNIFORM(-1, 1) SEED 3; SAVE P TO '$work/p.npy';
CREATE TENSOR Q[9, 3] TYPE f64; FILL Q UNIFORM(-1, 1) SEED 4; SAVE Q TO '$work/q.npy';
CREATE TENSOR V[9] TYPE f64; FILL V UNIFORM(-1, 1) SEED 5; SAVE V TO '$work/v.npy';
SQL
stmts="LOAD A FROM '$work/a.npy' CHUNK [13, 1];
LOAD B FROM '$work/b.npy' CHUNK [1, 2];
LOAD P FROM '$work/p.npy' CHUNK [3, 9];
LOAD Q FROM '$work/q.npy' CHUNK [9, 1];
LOAD V FROM '$work/v.npy' CHUNK [4];
C[i, j] = relu(SUM(A[i, k] * B[k, j]));
R[i, j] = P[i, k] * Q[k, j];
S[i] = SUM(P[i, k] * V[k]);"
printf "%s\nSAVE C TO '%s/c.npy'; SAVE R TO '%s/r.npy'; SAVE S TO '%s/s.npy';\n" "$stmts" "$work" "$work" "$work" |
  OPENBLAS_CORETYPE=Prescott "$TRADB" --bail --local-workers 2 "$work/generic" > "$work/generic.out" 2>&1 ||
  { cat "$work/generic.out"; fail "the statements on Prescott's kernels failed"; }
[ "$(worker_cores "$work/generic")" = Prescott ] || fail "local workers ran $(worker_cores "$work/generic"), not Prescott"
# the same on the reference kernels; the largest difference, printed
printf "%s\nLOAD Cg FROM '%s/c.npy'; LOAD Rg FROM '%s/r.npy'; LOAD Sg FROM '%s/s.npy';
ec[] = MAX(abs(C[i, j] - Cg[i, j])); er[] = MAX(abs(R[i, j] - Rg[i, j]));
es[] = MAX(abs(S[i] - Sg[i])); e[] = ec[] + er[] + es[];
PRINT e;\n" "$stmts" "$work" "$work" "$work" |
  "$TRADB" --bail --local-workers 2 --backend reference "$work/ref" > "$work/ref.out" 2>&1 ||
  { cat "$work/ref.out"; fail "the statements on the reference kernels failed"; }
e=$(tail -1 "$work/ref.out")
awk -v e="$e" 'BEGIN { exit !(e + 0 == e && e >= 0 && e < 1e-12) }' ||
  { cat "$work/ref.out"; fail "Prescott's kernels and the reference ones differ by '$e'"; }
ok

unset OPENBLAS_CORETYPE
mine=$("$TRADB" --version | core)
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  case "$mine" in
  Prescott | Core2 | Penryn | Dunnington | Nehalem | Atom | Sandybridge | "")
    fail "an AVX2 CPU runs OpenBLAS's generic '$mine' kernels" ;;
  esac
fi
"$TRADB" --bail --local-workers 2 -c 'CREATE TENSOR X[4, 4]; FILL X ONES;' \
  "$work/own" > "$work/own.out" 2>&1 || { cat "$work/own.out"; fail "a session failed"; }
[ "$(worker_cores "$work/own")" = "$mine" ] || fail "local workers ran $(worker_cores "$work/own"), --version says $mine"
start_worker 0
grep -q "listening (.*OpenBLAS $mine," "$work/w0.log" || fail "a worker started by hand: $(cat "$work/w0.log"), --version says $mine"
ok

# timeout PID: the OPENBLAS_THREAD_TIMEOUT process PID runs with ("" if none)
timeout_of() { tr '\0' '\n' < "/proc/$1/environ" | sed -n 's/^OPENBLAS_THREAD_TIMEOUT=//p'; }
[ "$(timeout_of "${wpid[0]}")" = 18 ] || fail "a worker started by hand has OPENBLAS_THREAD_TIMEOUT='$(timeout_of "${wpid[0]}")'"
stop_worker 0
OPENBLAS_THREAD_TIMEOUT=25 start_worker 0
[ "$(timeout_of "${wpid[0]}")" = 25 ] || fail "the user's OPENBLAS_THREAD_TIMEOUT=25 became '$(timeout_of "${wpid[0]}")'"
# a session's local workers, while it is open
mkfifo "$work/in"
"$TRADB" "$work/spin" < "$work/in" > "$work/spin.out" 2>&1 &
track $!
exec 7> "$work/in"
two_local() { [ "$(pgrep -f -- "--data $work/spin/workers/w" | wc -l)" -eq 2 ]; }
wait_until 20 "two local workers" two_local
for p in $(pgrep -f -- "--data $work/spin/workers/w"); do
  [ "$(timeout_of "$p")" = 18 ] || fail "local worker $p has OPENBLAS_THREAD_TIMEOUT='$(timeout_of "$p")'"
done
exec 7>&-
ok
finish
