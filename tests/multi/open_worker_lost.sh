#!/usr/bin/env bash
# A worker lost while a shell opens the database (killed as it tells the
# shell what it holds, which TRADB_TEST_SLOW_STORE_MS makes take 3 s) is
# taken for down, and the session goes on with the other workers: with
# replication 2 a SAVE reads every chunk from another replica.  The shell
# used to fail to open, with "worker ... is down (silent for 1.5 s)".
# Likewise a local worker that exits before it answers the shell (here it
# cannot open its chunk store): the shell says why and goes on with the
# others, where it failed with that reason; with none left it still does.
# Polls with deadlines; never sleeps a fixed time to wait for a state.
TEST=open_worker_lost
source "$TOP_SRCDIR/tests/multi/lib.sh"
for n in 0 1 2; do start_worker $n; done
eps="${ep[0]},${ep[1]},${ep[2]}"
"$TRADB" --bail --workers "$eps" "$work/db" > "$work/setup.out" 2>&1 <<SQL || { cat "$work/setup.out"; fail "set-up failed"; }
SET synchronous = full;
CREATE TENSOR X[64, 64] CHUNK [8, 8];
FILL X UNIFORM(-1, 1) SEED 4;
SAVE X TO '$work/ref.npy';
SQL

# worker 1 again, its store slow, logging each request it gets
stop_worker 1 TERM
export TRADB_TEST_SLOW_STORE_MS=3000 TRADB_TEST_TRACE=1
start_worker 1
unset TRADB_TEST_SLOW_STORE_MS TRADB_TEST_TRACE
asked_before=$(count "got INVENTORY" "$work/w1.log")
"$TRADB" --bail --workers "$eps" "$work/db" <<<"SAVE X TO '$work/x.npy';" > "$work/run.out" 2>&1 &
shell=$!
track "$shell"
asked() { [ "$(count "got INVENTORY" "$work/w1.log")" -gt "$asked_before" ]; }
wait_until 30 "worker 1 was not asked what it holds" asked
stop_worker 1 # while its store thread sleeps, before it answers
done_() { ! kill -0 "$shell" 2>/dev/null; }
wait_until 60 "the shell did not end" done_
wait "$shell" || fail "the session failed without worker 1: $(cat "$work/run.out")"
ok
cmp -s "$work/ref.npy" "$work/x.npy" || fail "the SAVE differs from the one made with every worker"
ok

# two local workers; then the second cannot start (its store a file)
ldb=$work/local
"$TRADB" --bail --local-workers 2 "$ldb" > "$work/lsetup.out" 2>&1 <<SQL || { cat "$work/lsetup.out"; fail "local set-up failed"; }
CREATE TENSOR X[64, 64] CHUNK [8, 8];
FILL X UNIFORM(-1, 1) SEED 4;
SAVE X TO '$work/lref.npy';
SQL
mv "$ldb/workers/w1" "$ldb/workers/w1.away"
echo "not a store" > "$ldb/workers/w1"
"$TRADB" --bail "$ldb" > "$work/lrun.out" 2>&1 <<<"SAVE X TO '$work/lx.npy';" \
  || fail "the session failed without local worker 1: $(cat "$work/lrun.out")"
grep -q "warning: local worker ipc://$ldb/workers/w1.ipc exited with status 1 (see $ldb/workers/w1.log); this session goes on without it" \
  "$work/lrun.out" || fail "the lost worker not named: $(cat "$work/lrun.out")"
cmp -s "$work/lref.npy" "$work/lx.npy" || fail "the SAVE differs from the one made with both local workers"
ok
# with no worker left the reason is the error
mv "$ldb/workers/w0" "$ldb/workers/w0.away"
echo "not a store" > "$ldb/workers/w0"
if "$TRADB" --bail "$ldb" > "$work/lnone.out" 2>&1 <<<"SHOW TENSORS;"; then
  fail "a session opened with no worker: $(cat "$work/lnone.out")"
fi
grep -q "local worker ipc://$ldb/workers/w[01].ipc exited with status 1" "$work/lnone.out" \
  || fail "no reason given: $(cat "$work/lnone.out")"
ok
finish
