#!/usr/bin/env bash
# A worker's failure reaches the shell with its reason, through the real
# coordinator path: a full disk (a small tmpfs, where this machine lets
# the test mount one), running out of memory (a worker under an address-
# space limit asked for a chunk larger than that), and a chunk that fails
# its checksum with no other replica.  Stored data stays intact.
TEST=worker_errors; source "$TOP_SRCDIR/tests/multi/lib.sh"

# Full disk: L's values (16 KiB) fit the disk, so the shell sends the
# FILL, but its 4096 chunk files (a 4 KiB page each on tmpfs) do not.
mnt=$work/small
mkdir -p "$mnt"
if mount -t tmpfs -o size=4m tmpfs "$mnt" 2>/dev/null; then
  mounts+=("$mnt")
  ep[0]="tcp://127.0.0.1:$(free_port)"
  "$TRADB" --worker --listen "${ep[0]}" --data "$mnt/w0" --threads 1 2>> "$work/w0.log" &
  wpid[0]=$!; track "${wpid[0]}"
  wait_until 20 "worker 0 not listening" grep -q listening "$work/w0.log"
  set +e
  "$TRADB" --workers "${ep[0]}" "$work/db0" \
    <<<'CREATE TENSOR S[64, 64]; FILL S ONES; CREATE TENSOR L[4096] CHUNK [1]; FILL L ONES;' \
    > /dev/null 2> "$work/full.err"
  rc=$?
  set -e
  [ $rc -ne 0 ] || fail "filling a tensor whose files are larger than the disk succeeded"
  grep -q "No space left on device" "$work/full.err" || fail "disk full not reported: '$(cat "$work/full.err")'"
  grep -q "malformed" "$work/full.err" && fail "disk full reported as a malformed reply"
  out=$("$TRADB" --workers "${ep[0]}" "$work/db0" <<<'s[] = SUM(S[i,j]); PRINT s;' 2>&1) || fail "S unreadable after a full disk: $out"
  [ "$(echo "$out" | tail -1)" = "4096" ] || fail "S wrong after a full disk: $out"
  stop_worker 0
  umount "$mnt"
  ok
else
  echo "$TEST: cannot mount a tmpfs here: the full-disk case is not run"
fi

# Out of memory: the worker may map at most 768 MiB; a one-chunk tensor
# of 900 MB cannot be made there.
ep[1]="tcp://127.0.0.1:$(free_port)"
( ulimit -v 786432; exec "$TRADB" --worker --listen "${ep[1]}" --data "$work/w1" --threads 1 --memory 16M ) 2>> "$work/w1.log" &
wpid[1]=$!; track "${wpid[1]}"
wait_until 20 "worker 1 not listening" grep -q listening "$work/w1.log"
set +e
"$TRADB" --workers "${ep[1]}" "$work/db1" \
  <<<'CREATE TENSOR k[4]; FILL k ONES; CREATE TENSOR M[15000, 15000] CHUNK [15000, 15000] TYPE f32; FILL M ONES;' \
  > /dev/null 2> "$work/oom.err"
rc=$?
set -e
[ $rc -ne 0 ] || fail "a chunk larger than the worker's memory was filled"
grep -q "out of memory" "$work/oom.err" || fail "out of memory not reported: '$(cat "$work/oom.err")'"
grep -q "malformed" "$work/oom.err" && fail "out of memory reported as a malformed reply"
out=$("$TRADB" --workers "${ep[1]}" "$work/db1" <<<'PRINT k;' 2>&1) || fail "k unreadable after OOM: $out"
[ "$(echo "$out" | tail -1)" = "1  1  1  1" ] || fail "k wrong after OOM: $out"
ok

# A damaged chunk with no other replica.
start_worker 2 --threads 1
"$TRADB" --workers "${ep[2]}" "$work/db2" <<<'SET replication = 1; CREATE TENSOR D[256, 256] CHUNK [128, 256]; FILL D ONES;' \
  || fail "set-up failed"
stop_worker 2
f=$(find "$work/w2" -name '*.chk' | head -1)
printf '\x55\x55\x55\x55' | dd of="$f" bs=1 seek=200 conv=notrunc 2>/dev/null
# --memory 64K: no copy of a 128 KiB chunk in memory, so the task below reads
# the damaged file (a copy in memory would be served instead)
start_worker 2 --threads 1 --memory 64K
set +e
"$TRADB" --workers "${ep[2]}" "$work/db2" <<<'PRINT D;' > /dev/null 2> "$work/sum.err"
rc=$?
set -e
[ $rc -ne 0 ] || fail "a damaged chunk was read"
grep -q "D" "$work/sum.err" && grep -qi "checksum\|damaged" "$work/sum.err" \
  || fail "the checksum failure does not say what and why: '$(cat "$work/sum.err")'"
ok

# A checksum failure found while the worker runs (not at its start).
"$TRADB" --workers "${ep[2]}" "$work/db2" <<<'CREATE TENSOR E[256, 256] CHUNK [128, 256]; FILL E ONES;' || fail "E failed"
for f in $(find "$work/w2" -name '*.chk' -newer "$work/sum.err"); do
  printf '\x55\x55\x55\x55' | dd of="$f" bs=1 seek=200 conv=notrunc 2>/dev/null
done
set +e
"$TRADB" --workers "${ep[2]}" "$work/db2" <<<'F[i,j] = E[i,j] + 1;' > /dev/null 2> "$work/run.err"
rc=$?
set -e
[ $rc -ne 0 ] || fail "a task read a damaged chunk"
grep -qi "checksum" "$work/run.err" || fail "the task's checksum failure does not say so: '$(cat "$work/run.err")'"
grep -q "malformed" "$work/run.err" && fail "checksum failure reported as a malformed reply"
ok
finish
