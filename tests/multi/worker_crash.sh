#!/usr/bin/env bash
# A local worker that dies in the middle of a statement (here SIGSEGV,
# as a fault in a kernel would send) is reported as such: its log ends
# on a line naming the signal and the stack, the statement fails at once
# with "local worker ... died of signal 11 (Segmentation fault) (see
# .../w0.log)" where it used to wait out the liveness window and say the
# worker was silent, and the stored tensors stay readable in the next
# session.  Polls with deadlines; never sleeps a fixed time to wait for a
# state.
TEST=worker_crash
source "$TOP_SRCDIR/tests/multi/lib.sh"
db=$work/db
nchunks() { find "$db/workers" -name '*.chk' | wc -l; }

# synchronous = full: each output chunk reaches its file as it is made,
# which is how the test sees the statement under way; layout = declared:
# many output chunks, one after another
"$TRADB" --bail "$db" > "$work/setup.out" 2>&1 <<'SQL' || { cat "$work/setup.out"; fail "set-up failed"; }
SET synchronous = full;
SET layout = declared;
CREATE TENSOR A[1536, 1536] CHUNK [256, 256];
FILL A ONES;
SQL
before=$(nchunks)

# the reference kernels make the product slow enough to catch mid-way
"$TRADB" --backend reference "$db" <<<'C[i,j] = A[i,k] * A[k,j];' > "$work/run.out" 2>&1 &
shell=$!
track "$shell"
writing() { [ "$(nchunks)" -gt "$before" ]; }
wait_until 60 "no output chunk written" writing
w0=$(pgrep -f -- "--listen ipc://$db/workers/w0.ipc") || fail "no local worker 0"
kill -SEGV "$w0"
done_() { ! kill -0 "$shell" 2>/dev/null; }
wait_until 60 "the shell did not end after its worker died" done_
set +e
wait "$shell"
rc=$?
set -e
[ $rc -ne 0 ] || fail "the statement succeeded without its worker"
grep -q "local worker ipc://$db/workers/w0.ipc died of signal 11 (Segmentation fault) (see $db/workers/w0.log)" \
  "$work/run.out" || fail "the death not reported: $(cat "$work/run.out")"
ok
grep -q "fatal signal 11 (SIGSEGV); its stack:" "$db/workers/w0.log" || fail "worker 0's log does not name its signal"
ok

# what was stored is intact
out=$("$TRADB" --bail "$db" <<<"lo[] = MIN(A[i,j]); hi[] = MAX(A[i,j]); n[] = SUM(A[i,j]) / $((1536 * 1536));
PRINT lo; PRINT hi; PRINT n;" 2>&1) || fail "the next session failed: $out"
[ "$(echo "$out" | grep -v '\[\]' | tr -d ' ' | paste -sd' ')" = "1 1 1" ] || fail "A changed: $out"
ok
finish
