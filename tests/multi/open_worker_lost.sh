#!/usr/bin/env bash
# A worker lost while a shell opens the database (killed as it tells the
# shell what it holds, which TRADB_TEST_SLOW_STORE_MS makes take 3 s) is
# taken for down, and the session goes on with the other workers: with
# replication 2 a SAVE reads every chunk from another replica.  The shell
# used to fail to open, with "worker ... is down (silent for 1.5 s)".
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
finish
