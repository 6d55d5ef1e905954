#!/usr/bin/env bash
# A database's chunks stay reachable whichever way its workers are
# configured: a database that ran on local workers and then had a remote
# worker added reopens with its local workers started too, and every
# tensor reads back; `.worker add` says what happens to the local data.
TEST=local_to_remote; source "$TOP_SRCDIR/tests/multi/lib.sh"
db=$work/db
"$TRADB" --local-workers 2 "$db" <<'EOF2' > "$work/ref.out" || fail "set-up failed"
CREATE TENSOR A[128, 128] CHUNK [32, 32];
FILL A UNIFORM(0, 1) SEED 4;
s[] = SUM(A[i,j]);
PRINT s;
EOF2
start_worker 0 --threads 1
"$TRADB" --local-workers 2 "$db" <<<".worker add ${ep[0]}" > "$work/add.out" 2>&1 || fail "add failed: $(cat "$work/add.out")"
grep -qi "local" "$work/add.out" || fail ".worker add does not say what happens to the local workers' data: '$(cat "$work/add.out")'"
out=$("$TRADB" "$db" <<<'s[] = SUM(A[i,j]); PRINT s;' 2>&1) || fail "local data unreachable after adding a worker: $out"
[ "$out" = "$(cat "$work/ref.out")" ] || fail "wrong result: '$out'"
ok

# New results may land on the remote worker too; all reads back.
out=$("$TRADB" "$db" <<<'B[i,j] = A[i,j] * 2; b[] = SUM(B[i,j]); PRINT b;' 2>&1) || fail "B failed: $out"
out2=$("$TRADB" "$db" <<<'b[] = SUM(B[i,j]); PRINT b; s[] = SUM(A[i,j]); PRINT s;' 2>&1) || fail "reopen failed: $out2"
[ "$(echo "$out2" | tail -2)" = "$(cat "$work/ref.out")" ] || fail "A changed: $out2"
ok
finish
