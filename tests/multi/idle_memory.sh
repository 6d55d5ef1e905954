#!/usr/bin/env bash
# What a worker keeps while the shell waits for the user's next statement.
# 1. Its chunks stay in memory when it goes idle: a statement typed after
#    the pause reads them without their files.  (When an idle worker let
#    them go, the next statement read all it needed from the files.)
# 2. The shell gives back the free heap a SAVE of a large tensor left, once
#    it has been idle a while.
# 3. The free heap a big statement leaves goes back to the system once the
#    worker is idle, all but the reserve it keeps for the next statement's
#    buffers (half of its --memory, at most 1 GiB): after the 256 MB
#    tensors are dropped, each local worker's resident memory must fall
#    below that reserve and 100 MB while the shell stays open.  (Without
#    the idle trim each keeps about 800 MB.)
# 0. Before that: a worker faults that reserve in once no tradb process on
#    the machine works, so a session's first statements reuse warm pages
#    (without it an idle new worker holds some 20 MB).  While another
#    process holds a slot of the work table (this test's own table, given
#    in TRADB_TEST_WORK_TABLE) the workers stay cold; once it is gone,
#    they warm.  (Without the wait they warm as soon as they start.)
#    Local workers hold their big chunks in shared memory instead
#    (util/blob.c), so these parts run with TRADB_TEST_NO_SHARE, as a
#    worker on tcp:// runs; then:
# 4. Workers on ipc:// with their chunks in shared memory: idle before
#    they made any chunk, they fault nothing in (their big buffers come
#    from a pool they warm with the sizes they made, not from the heap),
#    and once the 256 MB tensors are dropped each holds less than its
#    reserve and 100 MB, what its pool of shared memory keeps included (its --memory is
#    256 MB here, so the dropped chunks, some 384 MB a worker, are more
#    than the pool may keep).
# Polls with deadlines; never sleeps a fixed time to wait for a state.
TEST=idle_memory
source "$TOP_SRCDIR/tests/multi/lib.sh"
db=$work/db

hold_work_table

mkfifo "$work/in"
TRADB_TEST_NO_SHARE=1 "$TRADB" --local-workers 2 "$db" < "$work/in" > "$work/out" 2>&1 &
pid=$!
track "$pid"
exec 3> "$work/in"

# The shell's output is buffered while its input stays open; the error of
# a DROP of a tensor that does not exist, on stderr, says the statements
# before it are done.
marker() { echo "DROP TENSOR done_$1;" >&3; }
marked() { grep -q "no such tensor: done_$1" "$work/out"; }
shell_ok() {
  kill -0 "$pid" 2>/dev/null || { cat "$work/out"; fail "shell ended early"; }
}

# The local workers: the processes serving this database's sockets.
find_workers() {
  workers=$(pgrep -f -- "--listen ipc://$db/workers/w[01].ipc" || true)
  [ "$(echo "$workers" | wc -w)" -eq 2 ]
}
marker 0
wait_until 60 "2 local workers up" find_workers
rss() { awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$1/status"; }
# each worker's --memory, from its log ("memory 1506 MiB"), and the free
# heap it keeps: half of it, at most 1 GiB
mem=$(grep -ho "memory [0-9]* MiB" "$db"/workers/w0.log | head -1 | awk '{print $2}')
[ -n "$mem" ] || fail "no --memory in the worker's log"
reserve=$((mem / 2 < 1024 ? mem / 2 : 1024))

# 0. Cold while another process works: for a second after both workers
# are up, neither holds a quarter of its reserve (warming, a worker here
# faults in 1-2.5 MB a millisecond).
cold() {
  local w
  for w in $workers; do [ "$(rss "$w")" -lt $((reserve / 4)) ] || return 1; done
}
hold_until=$((SECONDS + 2))
while [ $SECONDS -lt $hold_until ]; do
  cold || fail "a worker warmed its heap while another process worked"
  sleep 0.05
done
ok
# Warm once it is gone: each idle worker faults in most of its reserve.
kill "$holder"
warm() {
  local w
  for w in $workers; do [ "$(rss "$w")" -ge $((reserve * 3 / 4)) ] || return 1; done
}
wait_until 60 "both workers holding $((reserve * 3 / 4)) MB of warm heap" warm
ok

cat >&3 <<'EOF2'
CREATE TENSOR A[8192, 8192] CHUNK [2048, 2048] TYPE f32;
FILL A ONES;
B[i,j] = A[i,j] * 2;
C[i,j] = B[i,j] + A[i,j];
EOF2
marker 1
wait_until 120 "the statements done" marked 1
shell_ok
[ "$(wc -l < "$work/out")" -eq 2 ] || { cat "$work/out"; fail "a statement failed"; }

# bytes the workers read from files (sockets do not count)
read_bytes() {
  local t=0 w
  for w in $workers; do t=$((t + $(awk '/^rchar/ {print $2}' "/proc/$w/io"))); done
  echo "$t"
}

# 1. The pause: every chunk in its file (A, B and C: 16 chunks each, on
# both workers), the last written 3 s ago, so that both workers have been
# idle for more than the 2 s after which they trim.
chunk_files() { find "$db/workers" -name '*.chk' | wc -l; }
all_written() { [ "$(chunk_files)" -ge 96 ]; }
wait_until 60 "96 chunk files written" all_written
newest=$(find "$db/workers" -name '*.chk' -printf '%T@\n' | sort -n | tail -1)
paused() { /usr/bin/python3 -c "import sys, time; sys.exit(time.time() < $newest + 3)"; }
wait_until 30 "a 3 s pause" paused
before=$(read_bytes)
echo "s[] = SUM(C[i,j]);" >&3
marker 2
wait_until 60 "the sum after the pause" marked 2
shell_ok
read=$(( $(read_bytes) - before ))
# C is 256 MB; its chunks from files would be all of it
[ "$read" -lt $((32 << 20)) ] || fail "the sum after an idle pause read $read bytes from files"
ok

# 2. The shell, which runs no kernels, gives back its free heap once idle:
# after a SAVE of C (256 MB, read through it in 16 MB chunks) it falls
# below 100 MB while it waits for the next statement.  (Without the idle
# trim it holds 268 MB.)
printf "SAVE C TO '%s';\n" "$work/c.npy" >&3
marker 4
wait_until 60 "the SAVE done" marked 4
shell_ok
shell_small() { [ "$(rss "$pid")" -lt 100 ]; }
wait_until 30 "the idle shell below 100 MB after a SAVE" shell_small
rm -f "$work/c.npy"
ok

# 3. Dropped: the free heap goes back.
printf 'DROP TENSOR A;\nDROP TENSOR B;\nDROP TENSOR C;\nDROP TENSOR s;\n' >&3
marker 3
wait_until 60 "the drops done" marked 3
small() {
  local w
  for w in $workers; do [ "$(rss "$w")" -lt $((reserve + 100)) ] || return 1; done
}
wait_until 30 "both workers below $((reserve + 100)) MB after 30 s" small
ok
[ "$(grep -v "no such tensor: done_" "$work/out" | wc -l)" -eq 0 ] || { cat "$work/out"; fail "a statement failed"; }

exec 3>&-
status=0
wait "$pid" || status=$?
[ "$status" -eq 1 ] || fail "shell exit status $status, not 1 (the markers' errors)"
grep -q "chunks in shared memory" "$db"/workers/w0.log && fail "TRADB_TEST_NO_SHARE was not heeded"

# 4. Two workers on ipc:// (so they share their chunks, as local workers
# do) with 256 MB each, a new database.
db=$work/db2
ep[0]="ipc://$work/s0.ipc"
ep[1]="ipc://$work/s1.ipc"
start_worker 0 --memory 256M --threads 1
start_worker 1 --memory 256M --threads 1
workers="${wpid[0]} ${wpid[1]}"
shares() { [ "$(cat "$work"/w[01].log | grep -c "chunks in shared memory")" -eq 2 ]; }
wait_until 30 "both workers' logs saying they share their chunks" shares
# idle, nobody working (the holder is gone), no chunk made: cold for 2 s
reserve=128 # half of each worker's 256 MB
hold_until=$((SECONDS + 2))
while [ $SECONDS -lt $hold_until ]; do
  cold || fail "a worker with its chunks in shared memory warmed a heap"
  sleep 0.05
done
ok
"$TRADB" --workers "${ep[0]},${ep[1]}" "$db" > "$work/out" 2>&1 <<'EOF2' || { cat "$work/out"; fail "the statements failed"; }
CREATE TENSOR A[8192, 8192] CHUNK [2048, 2048] TYPE f32;
FILL A ONES;
B[i,j] = A[i,j] * 2;
C[i,j] = B[i,j] + A[i,j];
s[] = SUM(C[i,j]);
PRINT s;
DROP TENSOR A;
DROP TENSOR B;
DROP TENSOR C;
EOF2
grep -q "2.01327e+08" "$work/out" || { cat "$work/out"; fail "SUM(C) is not 3 * 8192 * 8192"; }
wait_until 30 "both workers below $((reserve + 100)) MB with their chunks shared" small
ok
finish
