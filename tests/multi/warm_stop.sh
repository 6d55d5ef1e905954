#!/usr/bin/env bash
# A worker's warm heap (the free heap it faults in once no tradb process
# on the machine works, for the next statements' buffers) stops when the
# worker stops serving: a worker told to stop still writes the chunks it
# holds in memory only, and once nothing else works a warm heap would
# fault in its whole reserve beside those writes, for no statement.
# (Measured before: two local workers' warm heaps faulted in 1.1 GB as
# their shell closed.)
# 1. Two TCP workers are held cold (this test's own work table, given in
#    TRADB_TEST_WORK_TABLE, has a slot held by a stand-in process).
# 2. A shell fills a 256 MB tensor on them and closes: each worker holds
#    its copies in memory, all or most not yet in their files.
# 3. Worker 0 is told to stop (SIGTERM); once it logs that it is stopping
#    (it then writes those chunks), the stand-in goes, so the machine is
#    quiet while it writes.  Its last line must say its warm heap faulted
#    in nothing.  (Without the stop it faults in what it can until the
#    process exits.)
# Polls with deadlines; never sleeps a fixed time to wait for a state.
TEST=warm_stop
source "$TOP_SRCDIR/tests/multi/lib.sh"
db=$work/db

hold_work_table

start_worker 0
start_worker 1
printf 'CREATE TENSOR X[8192, 8192] CHUNK [2048, 2048] TYPE f32;\nFILL X ONES;\n' |
  "$TRADB" --workers "${ep[0]},${ep[1]}" "$db" > "$work/out" 2>&1 || { cat "$work/out"; fail "the shell failed"; }
# X's 16 chunks, 2 replicas, are written 2 s after they were made at the
# earliest, so worker 0 still has them to write when it is told to stop
# (on a machine slow enough to have written some, it has less to write
# and the check below still holds)

kill -TERM "${wpid[0]}"
stopping() { [ "$(count "stopping" "$work/w0.log")" -ge 1 ]; }
wait_until 30 "worker 0 stopping" stopping
kill "$holder"
exited() { ! kill -0 "${wpid[0]}" 2>/dev/null; }
wait_until 120 "worker 0 exited" exited
grep -q "warm heap: 0 of [1-9][0-9]* MiB faulted in" "$work/w0.log" ||
  fail "worker 0's warm heap ran while it stopped: $(grep 'warm heap' "$work/w0.log" || echo 'no report')"
# and what it held in memory only reached its files
[ "$(find "$work/w0" -name '*.chk' | wc -l)" -ge 16 ] || fail "worker 0 stopped without writing its chunks"
ok
finish
