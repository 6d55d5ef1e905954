#!/usr/bin/env bash
# A shell or its workers that stop running for longer than the 1.5 s
# liveness window (a laptop suspended, a VM paused, Ctrl-Z, a starved
# machine; here SIGSTOP for 2.5 s while a product runs):
#  (a) all of them: the product goes on as if nothing happened.  Each
#      side used to count the pause as the other's silence: the shell took
#      a worker for down and ran the statement again, or a worker stopped
#      the shell's task and the script ended at "interrupted", its later
#      statements never run;
#  (b) the shell alone: its workers stop its tasks, as they must for a
#      shell that was killed, and the shell, knowing it did not run, runs
#      the statement again, saying why.  A task stopped by a worker is
#      never taken for a Ctrl-C: it used to end the script.
# The length of the stop is the test's stimulus, not a wait for a state;
# states are polled with deadlines.
TEST=pause
source "$TOP_SRCDIR/tests/multi/lib.sh"
db=$work/db
"$TRADB" --bail --local-workers 2 "$db" > "$work/setup.out" 2>&1 <<'SQL' || { cat "$work/setup.out"; fail "set-up failed"; }
CREATE TENSOR A[1536, 1536] CHUNK [256, 256];
FILL A ONES;
SQL
tasks() { cat "$db"/workers/w*.log | grep -c "got TASK" || true; }
# paused WHO: run the product (reference kernels: seconds) and a PRINT
# after it; once a worker has its task, stop WHO (shell: the shell; all:
# the shell and its local workers) for 2.5 s; wait for the shell to end
paused() {
  local before shell kids
  before=$(tasks)
  TRADB_TEST_TRACE=1 "$TRADB" --backend reference "$db" > "$work/$1.out" 2>&1 <<'SQL' &
SET layout = declared;
C[i,j] = A[i,k] * A[k,j];
s[] = SUM(C[i,j]) / 1536;
PRINT s;
SQL
  shell=$!
  track "$shell"
  tasked() { [ "$(tasks)" -gt "$before" ]; }
  wait_until 60 "no worker got the product's task" tasked
  kids=$(pgrep -P "$shell" | tr '\n' ' ')
  if [ "$1" = all ]; then kill -STOP "$shell" $kids; else kill -STOP "$shell"; fi
  sleep 2.5 # the pause itself
  kill -CONT "$shell" $kids
  wait_status 120 "the shell did not end after the pause" "$shell"
}

paused all
[ $status -eq 0 ] || fail "(a) exit status $status: $(cat "$work/all.out")"
grep -q "warning\|interrupted\|stopped\|down" "$work/all.out" && fail "(a) the pause was taken for a failure: $(cat "$work/all.out")"
grep -Fxq "2.3593e+06" "$work/all.out" || fail "(a) wrong or no sum: $(cat "$work/all.out")"
ok

paused shell
[ $status -eq 0 ] || fail "(b) exit status $status: $(cat "$work/shell.out")"
grep -Eq "^line 2: warning: worker ipc://$db/workers/w[01].ipc: task stopped: coordinator silent for [0-9.]+ s \(this shell did not run for [0-9.]+ s\); the statement ran again$" \
  "$work/shell.out" || fail "(b) no warning saying why the statement ran again: $(cat "$work/shell.out")"
grep -q "interrupted" "$work/shell.out" && fail "(b) taken for a Ctrl-C: $(cat "$work/shell.out")"
grep -Fxq "2.3593e+06" "$work/shell.out" || fail "(b) the statements after it did not run: $(cat "$work/shell.out")"
ok
finish
