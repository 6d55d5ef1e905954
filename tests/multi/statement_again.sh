#!/usr/bin/env bash
# A worker lost while a statement runs (SIGKILL: a remote one known by its
# silence, a local one at once) no longer fails the statement: it runs
# again on the workers left, whose replicas hold what the lost one held,
# and says so in a warning; its result is the one every worker gives.
# Where running again could do harm it still fails: a COMMIT whose block
# had committed an output before the loss (worker_crash.sh has the other
# case, a local worker that faults).  The reference kernels make the
# product slow enough to kill a worker in it.  Polls with deadlines; never
# sleeps a fixed time to wait for a state.
TEST=statement_again
source "$TOP_SRCDIR/tests/multi/lib.sh"
N=${STATEMENT_AGAIN_N:-1024}
export TRADB_TEST_TRACE=1 # workers log each request they get

# tasks: the TASK requests worker N's log shows so far
tasks() { count "got TASK" "$1"; }

# --- remote workers -----------------------------------------------------------
for n in 0 1 2; do start_worker $n --backend reference; done
eps="${ep[0]},${ep[1]},${ep[2]}"
"$TRADB" --bail --workers "$eps" "$work/db" > "$work/setup.out" 2>&1 <<SQL || { cat "$work/setup.out"; fail "set-up failed"; }
SET layout = declared;
CREATE TENSOR A[$N, $N] CHUNK [128, 128];
FILL A UNIFORM(-1, 1) SEED 7;
SQL
# what every worker gives: the product with the three of them
"$TRADB" --bail --workers "$eps" "$work/db" > "$work/ref.out" 2>&1 <<SQL || { cat "$work/ref.out"; fail "the reference run failed"; }
R[i,j] = A[i,k] * A[k,j];
SAVE R TO '$work/ref.npy';
SQL
before=$(tasks "$work/w1.log")
syncs=$(count "got SYNC" "$work/w0.log")
"$TRADB" --bail --workers "$eps" "$work/db" > "$work/run.out" 2>&1 <<SQL &
C[i,j] = A[i,k] * A[k,j];
SAVE C TO '$work/c.npy';
SQL
shell=$!
track "$shell"
working() { [ "$(tasks "$work/w1.log")" -gt "$before" ]; }
wait_until 60 "worker 1 got no task" working
stop_worker 1 # SIGKILL, in its task
done_() { ! kill -0 "$shell" 2>/dev/null; }
wait_until 120 "the shell did not end" done_
wait "$shell" || fail "the statement failed without worker 1: $(cat "$work/run.out")"
ok
grep -q "^line 1: warning: worker ${ep[1]} is down (silent for [0-9.]* s); the statement ran again$" \
  "$work/run.out" || fail "no warning that it ran again: $(cat "$work/run.out")"
ok
cmp -s "$work/ref.npy" "$work/c.npy" || fail "the product differs from the one every worker made"
ok
# before it ran again, the workers left wrote what they held in memory only
[ "$(count "got SYNC" "$work/w0.log")" -gt "$syncs" ] || fail "worker 0 was not told to sync"
ok

# --- local workers --------------------------------------------------------------
ldb=$work/local
"$TRADB" --bail --local-workers 3 --backend reference "$ldb" > "$work/lsetup.out" 2>&1 <<SQL || { cat "$work/lsetup.out"; fail "local set-up failed"; }
SET layout = declared;
CREATE TENSOR A[$N, $N] CHUNK [128, 128];
FILL A UNIFORM(-1, 1) SEED 7;
R[i,j] = A[i,k] * A[k,j];
SAVE R TO '$work/lref.npy';
SQL
wlog=$ldb/workers/w1.log
# kill_w1 WHAT COND: once COND holds (within 60 s, else fail saying WHAT),
# SIGKILL local worker 1, then wait for the shell ($shell) to end
kill_w1() {
  wait_until 60 "$1" "$2"
  local w1
  w1=$(pgrep -f -- "--listen ipc://$ldb/workers/w1.ipc") || fail "no local worker 1"
  kill -KILL "$w1"
  wait_until 120 "the shell did not end" done_
}
before=$(tasks "$wlog")
"$TRADB" --bail --local-workers 3 --backend reference "$ldb" > "$work/lrun.out" 2>&1 <<SQL &
C[i,j] = A[i,k] * A[k,j];
SAVE C TO '$work/lc.npy';
SQL
shell=$!
track "$shell"
lworking() { [ "$(tasks "$wlog")" -gt "$before" ]; }
kill_w1 "local worker 1 got no task" lworking
wait "$shell" || fail "the statement failed without local worker 1: $(cat "$work/lrun.out")"
ok
grep -q "^line 1: warning: local worker ipc://$ldb/workers/w1.ipc died of signal 9 (Killed) (see $ldb/workers/w1.log); the statement ran again$" \
  "$work/lrun.out" || fail "no warning that it ran again: $(cat "$work/lrun.out")"
ok
cmp -s "$work/lref.npy" "$work/lc.npy" || fail "the product differs from the one every local worker made"
ok

# A block whose first statement committed before the loss fails, as it
# did: running it again would make X twice over.  X reads A chunk by
# chunk and C reads X whole, so C's tasks come after X's commit.
before=$(tasks "$wlog")
"$TRADB" --local-workers 3 --backend reference "$ldb" > "$work/brun.out" 2>&1 <<SQL &
BEGIN;
X[i,j] = A[i,j] + 1;
D[i,j] = X[i,k] * X[k,j];
COMMIT;
SQL
shell=$!
track "$shell"
second() { [ "$(tasks "$wlog")" -ge $((before + 2)) ]; }
kill_w1 "local worker 1 got no second task" second
if wait "$shell"; then fail "the block ran again after X committed: $(cat "$work/brun.out")"; fi
grep -q "died of signal 9 (Killed) (see $ldb/workers/w1.log) (the block stopped there; outputs made before it are committed)" \
  "$work/brun.out" || fail "the block's failure not said: $(cat "$work/brun.out")"
ok
grep -q "ran again" "$work/brun.out" && fail "the block ran again: $(cat "$work/brun.out")"
out=$("$TRADB" --bail "$ldb" <<<"e[] = MAX(ABS(X[i,j] - (A[i,j] + 1))); PRINT e; SHOW TENSORS;" 2>&1) \
  || fail "the next session failed: $out"
grep -qx "0" <<<"$out" || fail "X is not A + 1: $out"
grep -q "^D " <<<"$out" && fail "D committed: $out"
ok

# CALIBRATE commits its probes' tensors as it goes, yet runs again: they
# are its own, made again and dropped at its end.
before=$(tasks "$wlog")
"$TRADB" --local-workers 3 "$ldb" > "$work/crun.out" 2>&1 <<<"CALIBRATE;" &
shell=$!
track "$shell"
probes() { [ "$(tasks "$wlog")" -ge $((before + 10)) ]; }
kill_w1 "local worker 1 got no tenth task" probes
wait "$shell" || fail "CALIBRATE failed without local worker 1: $(cat "$work/crun.out")"
grep -q "died of signal 9 (Killed) (see $ldb/workers/w1.log); the statement ran again" "$work/crun.out" \
  || fail "CALIBRATE did not run again: $(cat "$work/crun.out")"
grep -q "^weights" "$work/crun.out" || fail "no weights: $(cat "$work/crun.out")"
out=$("$TRADB" --bail "$ldb" <<<"SHOW TENSORS;" 2>&1) || fail "the next session failed: $out"
grep -q "^_cal_" <<<"$out" && fail "probe tensors left: $out"
ok
finish
