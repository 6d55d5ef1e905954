#!/usr/bin/env bash
# What `SET synchronous` guarantees for a statement's output once it has
# committed (see the README's "What is guaranteed for stored data"):
# - a bad value is refused, listing the allowed ones;
# - normal (the default): the output is in the memory of both its
#   workers, so a worker killed at once loses nothing (the other serves
#   it), and workers told to stop write it to their files first, so
#   restarting them loses nothing either;
# - full: the output is in both workers' files, so even killing both at
#   once loses nothing;
# - a shell closing has its local workers write what they hold in memory
#   before it stops them, however long that takes: one still writing when
#   the shell kills it (TRADB_TEST_REAP_S: at once) would lose its copies,
#   both replicas of a chunk when both were.
TEST=synchronous; source "$TOP_SRCDIR/tests/multi/lib.sh"
for n in 0 1; do start_worker $n --threads 1; done
W="${ep[0]},${ep[1]}"
db=$work/db
run() { "$TRADB" --workers "$W" "$db"; }
sum_of() { run <<<"t$1[] = SUM($1[i,j]); PRINT t$1;" 2>&1 | tail -1; }
run <<<'CREATE TENSOR A[256, 256] CHUNK [64, 64]; FILL A ONES;' || fail "set-up failed"

set +e
out=$(run <<<'SET synchronous = sometimes;' 2>&1)
rc=$?
set -e
[ $rc -ne 0 ] || fail "a bad value was accepted"
grep -q "one of normal | full" <<<"$out" || fail "the error does not list the values: $out"
ok

# normal: one worker killed right after the statement.
run <<<'B[i,j] = A[i,j] * 2;' || fail "B failed"
stop_worker 1
[ "$(sum_of B)" = "131072" ] || fail "B lost or wrong with worker 1 killed: $(sum_of B)"
start_worker 1 --threads 1
ok

# normal: both workers told to stop right after the statement, then
# started again.
run <<<'C[i,j] = A[i,j] + 2;' || fail "C failed"
stop_worker 0 TERM; stop_worker 1 TERM
start_worker 0 --threads 1; start_worker 1 --threads 1
[ "$(sum_of C)" = "196608" ] || fail "C lost or wrong after the workers restarted: $(sum_of C)"
ok

# full: both workers killed right after the statement.
run <<<'SET synchronous = FULL; D[i,j] = A[i,j] * 4;' || fail "D failed"
stop_worker 0; stop_worker 1
start_worker 0 --threads 1; start_worker 1 --threads 1
[ "$(sum_of D)" = "262144" ] || fail "D lost or wrong after both workers were killed: $(sum_of D)"
ok

# normal, local workers: 4096 chunks in both workers' memory when the
# shell closes, and a shell that kills a worker not stopped at once.
ldb=$work/local
TRADB_TEST_REAP_S=0 "$TRADB" --local-workers 2 "$ldb" \
  <<<'CREATE TENSOR D[64, 64] CHUNK [1, 1]; FILL D ONES;' || fail "D failed"
# kept_after_close DB T: the 64 x 64 ones T of database DB, read by a new
# session after its shell closed, whole and on both local workers, and
# no worker of DB found a chunk of its lists missing
kept_after_close() {
  local out
  out=$("$TRADB" --local-workers 2 "$1" <<<"t$2[] = SUM($2[i,j]); PRINT t$2; SHOW TENSORS;" 2>&1) \
    || fail "$2 unreadable after its shell closed: $out"
  grep -Fxq '4096' <<<"$out" || fail "$2 lost or wrong after its shell closed: $out"
  echo "$out" | awk -v t="$2" '$1 == t && $NF != 0 { bad = 1 } END { exit bad }' \
    || fail "$2 under-replicated after its shell closed: $out"
  if grep -h "lists here are missing" "$1"/workers/w*.log; then
    fail "a local worker lost chunks of $2 it held in memory"
  fi
}
kept_after_close "$ldb" D
ok

# normal, local workers: a session that replaced a tensor 40 times writes
# at its close the version it kept, not the 39 it let go of, whose drops
# were still waiting for a ping (each worker logs the files it wrote).
rdb=$work/replaced
{ printf 'CREATE TENSOR A[64, 64] CHUNK [32, 32]; FILL A ONES;\n'
  for i in $(seq 40); do printf 'C[i,j] = A[i,j] * 2;\n'; done
  printf 'c[] = SUM(C[i,j]); PRINT c;\n'; } | "$TRADB" --local-workers 2 "$rdb" > "$work/replaced.out" 2>&1 \
  || fail "the session replacing C failed: $(cat "$work/replaced.out")"
grep -Fxq 8192 "$work/replaced.out" || fail "C is wrong: $(cat "$work/replaced.out")"
written=$(sed -n 's/.*closing the store of database [0-9a-f]*: \([0-9]*\) chunk files written.*/\1/p' \
  "$rdb"/workers/w*.log | awk '{ n += $1 } END { print n + 0 }')
# A, C and c on both workers (18 files), and room for a few versions the
# writer may find due on a slow machine; all 40 versions would be 320 more
[ "$written" -gt 0 ] && [ "$written" -le 60 ] \
  || fail "the workers wrote $written chunk files for a session that kept 9 chunks"
ok

# normal, local workers: one stopped by a signal (SIGSTOP) when its shell
# closes.  It is continued to stop as asked, writing what it holds: the
# shell waited 120 s for it, then killed it.
sdb=$work/stopped
w0_of_sdb() { pgrep -f "ipc://$sdb/workers/w0.ipc" | head -1; }
printed() { grep -Fxq '64' "$work/stopped.out" 2>/dev/null; }
stopped() { [ -f "$work/stopped.go" ]; }
feed() {
  printf 'CREATE TENSOR E[64, 64] CHUNK [8, 8]; FILL E ONES; n[] = 64; PRINT n;\n'
  wait_until 60 "the worker was not stopped" stopped
}
feed | "$TRADB" --local-workers 2 "$sdb" >"$work/stopped.out" 2>&1 &
shell=$!
track "$shell"
wait_until 60 "the set-up did not run" printed
w0=$(w0_of_sdb)
track "$w0"
kill -STOP "$w0"
touch "$work/stopped.go" # the shell's input ends
gone() { ! kill -0 "$shell" 2>/dev/null; }
wait_until 30 "the shell did not stop while a local worker was stopped" gone
wait "$shell" || fail "the session failed: $(cat "$work/stopped.out")"
kept_after_close "$sdb" E
ok
finish
