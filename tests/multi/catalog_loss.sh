#!/usr/bin/env bash
# A database whose catalog.db was emptied or deleted while its local
# workers hold chunks is an error saying so: no new catalog is made over
# the data and no chunk file goes.  Putting the catalog back gives the
# data back.  A damaged catalog is an error too.
TEST=catalog_loss; source "$TOP_SRCDIR/tests/multi/lib.sh"
db=$work/db
"$TRADB" --local-workers 2 "$db" <<'EOF2' > "$work/before.out" || fail "set-up failed"
CREATE TENSOR A[256, 256] CHUNK [64, 64];
FILL A UNIFORM(-1, 1) SEED 5;
s[] = SUM(A[i,j]);
PRINT s;
EOF2
n=$(nchk "$db/workers")
[ "$n" -ge 32 ] || fail "expected chunk files, found $n"
cp "$db/catalog.db" "$work/catalog.bak"

# Emptied.
: > "$db/catalog.db"
set +e
"$TRADB" --local-workers 2 "$db" <<<'SHOW TENSORS;' > "$work/empty.out" 2> "$work/empty.err"
rc=$?
set -e
[ $rc -ne 0 ] || fail "an emptied catalog was accepted: $(cat "$work/empty.out")"
grep -q "catalog" "$work/empty.err" || fail "the error does not say what is wrong: $(cat "$work/empty.err")"
[ "$(nchk "$db/workers")" -eq "$n" ] || fail "chunk files went: $n before, $(nchk "$db/workers") after"
[ ! -s "$db/catalog.db" ] || fail "a new catalog was written over the old one"
ok

# Deleted.
rm -f "$db/catalog.db"
set +e
"$TRADB" --local-workers 2 "$db" <<<'SHOW TENSORS;' > "$work/gone.out" 2> "$work/gone.err"
rc=$?
set -e
[ $rc -ne 0 ] || fail "a deleted catalog was re-created: $(cat "$work/gone.out")"
grep -q "catalog" "$work/gone.err" || fail "the error does not say what is wrong: $(cat "$work/gone.err")"
[ "$(nchk "$db/workers")" -eq "$n" ] || fail "chunk files went after the catalog was deleted"
[ ! -e "$db/catalog.db" ] || fail "a new catalog was created"
ok

# The catalog back: the data back.
cp "$work/catalog.bak" "$db/catalog.db"
out=$("$TRADB" --local-workers 2 "$db" <<<'s[] = SUM(A[i,j]); PRINT s;') || fail "restored catalog refused"
[ "$out" = "$(cat "$work/before.out")" ] || fail "data changed: '$out'"
ok

# Damaged: still a clear error, nothing dropped.
printf 'not a catalog at all, just some bytes of garbage that fill a page' > "$db/catalog.db"
set +e
"$TRADB" --local-workers 2 "$db" <<<'SHOW TENSORS;' > /dev/null 2> "$work/bad.err"
rc=$?
set -e
[ $rc -ne 0 ] && grep -q "catalog" "$work/bad.err" || fail "damaged catalog: $(cat "$work/bad.err")"
[ "$(nchk "$db/workers")" -eq "$n" ] || fail "chunk files went after a damaged catalog"
ok
finish
