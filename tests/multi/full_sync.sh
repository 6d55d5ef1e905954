#!/usr/bin/env bash
# Under SET synchronous = full every committed chunk is durable before its
# statement ends, on one copy for each file system its copies are on
# (README, "What is guaranteed for stored data"):
# 1. two workers on one file system: each output chunk is synced by one of
#    them (16 chunks, 16 synced, each worker its share), not both;
# 2. both workers killed at once right after the commit: every chunk reads
#    back from its synced copy, and the lost copies are made again;
# 3. workers on two file systems (TRADB_TEST_FS names them): both copies
#    are synced (32);
# 4. local workers (the embedded default) sync one copy between them.
TEST=full_sync; source "$TOP_SRCDIR/tests/multi/lib.sh"
db=$work/db
for n in 0 1; do TRADB_TEST_TRACE=1 start_worker $n --threads 1; done
W="${ep[0]},${ep[1]}"
# synced N LOG...: the chunks SYNC requests named in the logs' lines from
# line N on (the close's "all held in memory only" not counted)
synced() {
  local from=$1; shift
  local f total=0 k
  for f in "$@"; do
    k=$(tail -n "+$from" "$f" | awk '/SYNC of [0-9]+ chunks$/ {s += $(NF - 1)} END {print s + 0}')
    total=$((total + k))
  done
  echo "$total"
}
lines() { wc -l < "$1"; }

"$TRADB" --bail --workers "$W" "$db" > "$work/setup.out" 2>&1 <<'SQL' || fail "set-up failed: $(cat "$work/setup.out")"
SET synchronous = full;
CREATE TENSOR A[512, 512] CHUNK [128, 128];
FILL A ONES;
SQL

# 1. One statement of 16 output chunks, 2 copies each, one file system.
l0=$(( $(lines "$work/w0.log") + 1 )); l1=$(( $(lines "$work/w1.log") + 1 ))
"$TRADB" --bail --workers "$W" "$db" -c 'C[i,j] = A[i,j] * 2;' > "$work/one.out" 2>&1 ||
  fail "the statement failed: $(cat "$work/one.out")"
s0=$(synced "$l0" "$work/w0.log"); s1=$(synced "$l1" "$work/w1.log")
[ $((s0 + s1)) -eq 16 ] || fail "16 chunks on one file system: $s0 + $s1 synced, not 16 (one copy each)"
ok
[ "$s0" -gt 0 ] && [ "$s1" -gt 0 ] || fail "one worker synced every chunk ($s0 and $s1): the syncs are not shared"
ok

# 2. Both workers killed at once: the synced copies hold every chunk.
stop_worker 0; stop_worker 1
for n in 0 1; do TRADB_TEST_TRACE=1 start_worker $n --threads 1; done
"$TRADB" --bail --workers "$W" "$db" > "$work/two.out" 2>&1 <<'SQL' || fail "reading C failed: $(cat "$work/two.out")"
S[] = SUM(C[i,j]);
PRINT S;
SQL
grep -qx "524288" "$work/two.out" || fail "C reads wrong after both workers were killed: $(cat "$work/two.out")"
ok
replicas() {
  "$TRADB" --workers "$W" "$db" -c 'SHOW TENSORS;' > "$work/show.out" 2>&1 &&
    [ "$(awk '$1 == "C" {print $(NF - 1), $NF}' "$work/show.out")" = "2 0" ]
}
wait_until 60 "C's lost copies were not made again" replicas
ok

# 3. Two file systems: each copy is synced on its own.  (Stopped by
# SIGTERM, the workers write what they hold: nothing to repair after.)
stop_worker 0 TERM; stop_worker 1 TERM
TRADB_TEST_TRACE=1 TRADB_TEST_FS=fs-a start_worker 0 --threads 1
TRADB_TEST_TRACE=1 TRADB_TEST_FS=fs-b start_worker 1 --threads 1
l0=$(( $(lines "$work/w0.log") + 1 )); l1=$(( $(lines "$work/w1.log") + 1 ))
"$TRADB" --bail --workers "$W" "$db" -c 'D[i,j] = A[i,j] + 1;' > "$work/three.out" 2>&1 ||
  fail "the statement failed: $(cat "$work/three.out")"
s0=$(synced "$l0" "$work/w0.log"); s1=$(synced "$l1" "$work/w1.log")
[ "$s0" -eq 16 ] && [ "$s1" -eq 16 ] || fail "two file systems: $s0 and $s1 synced, not 16 and 16"
ok

# 4. Local workers on the database's own file system.
TRADB_TEST_TRACE=1 "$TRADB" --bail --local-workers 2 "$work/local" > "$work/four.out" 2>&1 <<'SQL' ||
SET synchronous = full;
CREATE TENSOR A[512, 512] CHUNK [128, 128];
FILL A ONES;
C[i,j] = A[i,j] * 2;
S[] = SUM(C[i,j]);
PRINT S;
SQL
  fail "the local session failed: $(cat "$work/four.out")"
grep -qx "524288" "$work/four.out" || fail "C reads wrong on local workers: $(cat "$work/four.out")"
s=$(synced 1 "$work/local/workers/w0.log" "$work/local/workers/w1.log")
# A, C and S: 16 + 16 + 1 chunks, one copy each
[ "$s" -eq 33 ] || fail "local workers synced $s chunks, not 33 (one copy of each)"
ok
finish
