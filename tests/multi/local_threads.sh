#!/usr/bin/env bash
# Kernel threads of local workers (README, `--threads N`): without
# --threads, the N local workers a shell starts get twice the machine's
# cores among them (at least 1 each), so that a core one worker leaves
# idle is taken by another's thread; --threads N gives each N.  Each
# worker's log names its threads in its `listening` line.  More local
# workers than a cluster has are refused.
TEST=local_threads
source "$TOP_SRCDIR/tests/multi/lib.sh"

cores=$(getconf _NPROCESSORS_ONLN)
threads_of() { sed -n 's/.*listening (.*, \([0-9]*\) threads,.*/\1/p' "$1"/workers/w*.log | sort -u; }

# session DIR ARGS...: a session that stores a product on its local workers
session() {
  local dir=$1
  shift
  "$TRADB" --bail "$@" -c 'CREATE TENSOR A[64, 64] CHUNK [16, 16]; FILL A ONES;
C[i, j] = A[i, k] * A[k, j]; PRINT C[0, 0];' "$work/$dir" > "$work/$dir.out" 2>&1 ||
    { cat "$work/$dir.out"; fail "a session with $* failed"; }
  [ "$(tail -1 "$work/$dir.out")" = 64 ] || { cat "$work/$dir.out"; fail "$*: C[0, 0] is not 64"; }
}

for n in 1 2 4; do
  session "n$n" --local-workers "$n"
  want=$((2 * cores / n))
  [ "$want" -ge 1 ] || want=1
  logs=$(ls "$work/n$n"/workers/w*.log | wc -l)
  [ "$logs" = "$n" ] || fail "$n local workers asked, $logs logs"
  got=$(threads_of "$work/n$n")
  [ "$got" = "$want" ] || fail "$n local workers on $cores cores run '$got' threads each, not $want"
  ok
done

session given --local-workers 2 --threads 3
got=$(threads_of "$work/given")
[ "$got" = 3 ] || fail "--threads 3: the local workers run '$got' threads each"
ok

# More local workers than a cluster has (64, the optimizer's site sets)
# are refused before any starts; 99 used to start, and the first
# statement crashed the shell in the layout search.
set +e
"$TRADB" --local-workers 99 -c 'CREATE TENSOR A[4]; FILL A ONES; S[] = SUM(A[i]);' "$work/many" \
  > "$work/many.out" 2>&1
rc=$?
set -e
[ $rc -eq 1 ] || { cat "$work/many.out"; fail "--local-workers 99: exit status $rc, expected 1"; }
grep -q "99 local workers asked for: a cluster has at most 64" "$work/many.out" ||
  { cat "$work/many.out"; fail "--local-workers 99: no message naming the limit"; }
[ ! -e "$work/many/workers/w0.log" ] || fail "--local-workers 99: a worker started"
ok
finish
