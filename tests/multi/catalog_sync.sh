#!/usr/bin/env bash
# Under SET synchronous = normal a statement's output is in its workers'
# memory when it commits, and its catalog entry is not synced to disk
# either; the version it replaced stays on the workers until the catalog is
# synced, since a crash of the machine could bring the catalog back to it
# (README, "What is guaranteed for stored data"):
# - right after replacing T the workers hold both versions; a commit under
#   synchronous = full syncs the catalog and drops the old ones at once;
# - once a statement has waited DI_FORGOT_S (here 0 s: TRADB_TEST_FORGOT_S)
#   the old version goes with its statement's clean-up;
# - a shell about to wait for input syncs and drops, so an idle session
#   owes nothing;
# - every version reads as made, and a shell's close leaves the workers
#   with the current versions only.
TEST=catalog_sync; source "$TOP_SRCDIR/tests/multi/lib.sh"
for n in 0 1; do TRADB_TEST_TRACE=1 start_worker $n --threads 1; done
W="${ep[0]},${ep[1]}"
db=$work/db
# the chunks column of .workers, one number per worker
held() { awk '$1 ~ /^tcp:/ {printf "%s ", $4}' "$1"; }

# 1. One script (a file: the shell never waits for it).  T has 4 chunks,
# on both workers (replication 2): 4 chunks each.
cat > "$work/one.tql" <<'SQL'
SET replication = 2;
CREATE TENSOR T[64, 64] CHUNK [32, 32];
FILL T ONES;
T[i,j] = T[i,j] * 3;
.workers
SET synchronous = full;
T[i,j] = T[i,j] + 1;
.workers
SET synchronous = normal;
U[] = SUM(T[i,j]);
PRINT U;
SQL
TRADB_TEST_FORGOT_S=600 "$TRADB" --workers "$W" "$db" < "$work/one.tql" > "$work/one.out" 2>&1 ||
  fail "the script failed: $(cat "$work/one.out")"
csplit -s -f "$work/part" "$work/one.out" '/^endpoint/' '{1}'
[ "$(held "$work/part01")" = "8 8 " ] ||
  fail "after an unsynced replace the workers hold $(held "$work/part01")chunks, not both versions (8 8)"
ok
[ "$(held "$work/part02" | head -1)" = "4 4 " ] ||
  fail "after a synced commit the workers hold $(held "$work/part02")chunks, not the current version's (4 4)"
ok
grep -qx "16384" "$work/part02" || fail "T reads wrong: $(tail -3 "$work/one.out")"
ok

# From here on U (one chunk) is held too: the current versions are 5 5.
# 2. Due at once: the old version goes with the statement's clean-up.
printf 'T[i,j] = T[i,j] * 2;\n.workers\nU[] = SUM(T[i,j]);\nPRINT U;\n' > "$work/two.tql"
TRADB_TEST_FORGOT_S=0 "$TRADB" --workers "$W" "$db" < "$work/two.tql" > "$work/two.out" 2>&1 ||
  fail "the second script failed: $(cat "$work/two.out")"
[ "$(held "$work/two.out")" = "5 5 " ] ||
  fail "with the catalog due at once the workers hold $(held "$work/two.out")chunks, not 5 5"
grep -qx "32768" "$work/two.out" || fail "T reads wrong: $(cat "$work/two.out")"
ok

# 3. A session that waits for its input: statements from a fifo.
mkfifo "$work/in"
TRADB_TEST_FORGOT_S=600 "$TRADB" --workers "$W" "$db" < "$work/in" > "$work/three.out" 2>&1 &
shell=$!; track $shell
exec 7> "$work/in"
printf 'T[i,j] = T[i,j] - 1;\n.workers\n' >&7
shown() { [ "$(grep -c "^endpoint" "$work/three.out")" -ge "$1" ]; }
wait_until 60 "the replace did not finish" shown 1
[ "$(held "$work/three.out")" = "9 9 " ] ||
  fail "right after the replace the workers hold $(held "$work/three.out")chunks, not 9 9"
ok
# waiting for the next line, the shell syncs and drops: ask until it has
# (the last .workers of the output)
n=1
dropped() {
  n=$((n + 1)); echo ".workers" >&7
  wait_until 30 ".workers did not answer" shown $n
  tail -4 "$work/three.out" | grep -q "^tcp:" &&
    [ "$(awk '/^endpoint/ {k=0} $1 ~ /^tcp:/ {k++; c[k]=$4} END {print c[1], c[2]}' "$work/three.out")" = "5 5" ]
}
wait_until 30 "an idle session kept the old version on the workers" dropped
ok
printf 'U[] = SUM(T[i,j]);\nPRINT U;\n' >&7
exec 7>&-
set +e; wait $shell; rc=$?; set -e
[ $rc -eq 0 ] || fail "the fifo shell failed: $(cat "$work/three.out")"
grep -qx "28672" "$work/three.out" || fail "T reads wrong: $(tail -3 "$work/three.out")"
ok

# 4. A shell that closes with old versions held drops them first: one
# DROP to each worker (its statements have nothing else to drop).
drops() { echo "$(count "got DROP" "$work/w0.log") $(count "got DROP" "$work/w1.log")"; }
read -r a0 a1 <<<"$(drops)"
printf 'T[i,j] = T[i,j] + 1;\nT[i,j] = T[i,j] + 1;\n' | TRADB_TEST_FORGOT_S=600 "$TRADB" --workers "$W" "$db" ||
  fail "the fourth script failed"
read -r b0 b1 <<<"$(drops)"
[ $((b0 - a0)) -eq 1 ] && [ $((b1 - a1)) -eq 1 ] ||
  fail "the closing shell sent $((b0 - a0)) and $((b1 - a1)) DROP requests, not one to each worker"
ok
printf '.workers\nU[] = SUM(T[i,j]);\nPRINT U;\n' | "$TRADB" --workers "$W" "$db" > "$work/four.out" 2>&1
[ "$(held "$work/four.out")" = "5 5 " ] || fail "after a close the workers hold $(held "$work/four.out")chunks, not 5 5"
grep -qx "36864" "$work/four.out" || fail "T reads wrong: $(cat "$work/four.out")"
ok
finish
