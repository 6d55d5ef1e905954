#!/usr/bin/env bash
# Workers on one machine (ipc://) take each other's chunks out of memory:
# a replica of a task's output, or an operand sent for a join, is copied
# by the receiver out of the sender's process (TN_PULL) instead of through
# the socket.  The copies are the chunks: with the worker that made them
# killed, the other serves the same bytes.  A worker that may not read its
# peer (TRADB_TEST_NO_PULL here; the OS refusing process_vm_readv in
# life) refuses, and the sender sends the bytes instead, with the same
# result.  Workers trace the requests they get (TRADB_TEST_TRACE).
TEST=local_pull; source "$TOP_SRCDIR/tests/multi/lib.sh"

# run_case NAME [VAR=value...]: two ipc:// workers started with those in
# their environment, a product
# and a map whose outputs are replicated on both, saved; then worker 0
# killed and the outputs saved again from worker 1 alone.
run_case() {
  local name=$1; shift
  local d=$work/$name
  mkdir -p "$d"
  ep[0]="ipc://$d/w0.ipc"; ep[1]="ipc://$d/w1.ipc"
  local v
  export TRADB_TEST_TRACE=1
  for v in "$@"; do export "${v?}"; done
  for n in 0 1; do start_worker $n --threads 1; done
  unset TRADB_TEST_TRACE
  for v in "$@"; do unset "${v%%=*}"; done
  local W="${ep[0]},${ep[1]}"
  "$TRADB" --workers "$W" "$d/db" > "$d/a.out" 2>&1 <<EOF || fail "$name: statements failed: $(cat "$d/a.out")"
SET replication = 2;
CREATE TENSOR A[512, 512] CHUNK [128, 512];
FILL A UNIFORM(-1, 1) SEED 7;
CREATE TENSOR B[512, 512] CHUNK [512, 128];
FILL B UNIFORM(-1, 1) SEED 8;
C[i,j] = A[i,k] * B[k,j];
D[i,j] = C[i,j] * 2 + A[i,j];
SAVE C TO '$d/c1.npy';
SAVE D TO '$d/d1.npy';
EOF
  stop_worker 0
  "$TRADB" --workers "$W" "$d/db" > "$d/b.out" 2>&1 <<EOF || fail "$name: reading from worker 1 alone failed: $(cat "$d/b.out")"
SAVE C TO '$d/c2.npy';
SAVE D TO '$d/d2.npy';
EOF
  stop_worker 1
  cmp -s "$d/c1.npy" "$d/c2.npy" || fail "$name: C read from worker 1 alone differs"
  cmp -s "$d/d1.npy" "$d/d2.npy" || fail "$name: D read from worker 1 alone differs"
  for n in 0 1; do mv "$work/w$n.log" "$d/w$n.log"; done
  unset 'ep[0]' 'ep[1]'
}

run_case pull
pulls=$(( $(count "got PULL" "$work/pull/w0.log") + $(count "got PULL" "$work/pull/w1.log") ))
[ "$pulls" -gt 0 ] || fail "no chunk was pulled between the two local workers"
refused=$(cat "$work"/pull/w*.log | grep -c "PULL refused\|cannot copy" || true)
[ "$refused" -eq 0 ] || fail "pulls failed: $(grep -h "PULL refused\|cannot copy" "$work"/pull/w*.log)"
echo "$TEST: $pulls chunks pulled, none refused"
ok

run_case refused TRADB_TEST_NO_PULL=1
grep -q "PULL refused" "$work"/refused/w*.log || fail "no pull was refused with TRADB_TEST_NO_PULL"
grep -q "cannot copy chunks out of this worker" "$work"/refused/w*.log \
  || fail "a refused pull was not sent instead"
ok
finish
