#!/usr/bin/env bash
# A damaged replica is routed around and repaired: every worker holds A
# (replication 3); with every chunk file
# of A on worker 0 damaged while it runs, statements that join on A, PRINT
# and SAVE still give the right answer (each read or task that meets a bad
# copy is retried on another replica), worker 0 sets the bad copies it
# read aside, and they are made again from good ones; the ones no
# statement read are found when worker 0 restarts, and repaired as well,
# so that worker 0 alone serves A afterwards.
TEST=damaged_replica; source "$TOP_SRCDIR/tests/multi/lib.sh"
# --memory 64K: the workers keep no copy of a 128 KiB chunk in memory (a read
# would be served from it and never meet the damaged file)
for n in 0 1 2; do start_worker $n --threads 1 --memory 64K; done
W="${ep[0]},${ep[1]},${ep[2]}"
db=$work/db
"$TRADB" --workers "$W" "$db" <<'EOF2' > "$work/ref.out" || fail "set-up failed"
SET replication = 3;
CREATE TENSOR A[256, 256] CHUNK [128, 256];
FILL A UNIFORM(-1, 1) SEED 21;
C[i,j] = A[i,k] * A[k,j];
c[] = SUM(C[i,j]);
PRINT c;
PRINT A[100:101, 0:4];
EOF2
"$TRADB" --workers "$W" "$db" <<<'DROP TENSOR C; DROP TENSOR c;' || fail "drop failed"
bad=0
for f in $(find "$work/w0" -name '*.chk'); do
  printf '\x55\x55\x55\x55' | dd of="$f" bs=1 seek=200 conv=notrunc 2>/dev/null
  bad=$((bad + 1))
done
[ "$bad" -gt 0 ] || fail "worker 0 holds no chunk of A"

out=$("$TRADB" --workers "$W" "$db" <<EOF2 2> "$work/run.err"
C[i,j] = A[i,k] * A[k,j];
c[] = SUM(C[i,j]);
PRINT c;
PRINT A[100:101, 0:4];
SAVE A TO '$work/a.npy';
EOF2
) || fail "statements over a damaged replica failed: $(cat "$work/run.err")"
[ "$out" = "$(cat "$work/ref.out")" ] || fail "wrong results over a damaged replica: '$out' vs '$(cat "$work/ref.out")'"
ok

# The copies that were read were set aside and made again from good ones.
bad=$(find "$work/w0" -name '*.chk.bad')
[ -n "$bad" ] || fail "worker 0 set no damaged copy aside"
for b in $bad; do
  wait_until 30 "the damaged copy ${b##*/} was not repaired" test -f "${b%.bad}"
done
ok

# Copies no statement read are found when worker 0 restarts (its store
# verifies every file changed since its last clean close, as these were)
# and are repaired too: worker 0 then serves all of A on its own.
stop_worker 0 TERM
start_worker 0 --threads 1 --memory 64K
repaired() { [ "$("$TRADB" --workers "$W" "$db" <<<'SHOW TENSORS;' | awk 'NR > 2 && $1 == "A" {print $NF}')" = 0 ]; }
wait_until 60 "A not repaired after worker 0 restarted" repaired
stop_worker 1; stop_worker 2
out=$("$TRADB" --workers "$W" "$db" <<<'s[] = SUM(A[i,j]); PRINT s; PRINT A[100:101, 0:4];' 2>&1) \
  || fail "worker 0 alone cannot serve A: $out"
"$TRADB" --workers "$W" "$db" <<<'C[i,j] = A[i,k] * A[k,j]; c[] = SUM(C[i,j]); PRINT c; PRINT A[100:101, 0:4];' \
  > "$work/alone.out" 2> "$work/alone.err" || fail "worker 0 alone cannot compute on A: $(cat "$work/alone.err")"
grep -q "fewer than the 3 wanted" "$work/alone.err" || fail "no warning about the missing replicas: $(cat "$work/alone.err")"
[ "$(cat "$work/alone.out")" = "$(cat "$work/ref.out")" ] || fail "worker 0's A is wrong: '$(cat "$work/alone.out")'"
ok
finish
