#!/bin/bash
# tests/golden/run.sh - golden tests of the tradb shell.
#
# For every tests/golden/CASE.tql (sorted): in a scratch directory holding a
# copy of tests/data/, run `$TRADB [ARGS] < CASE.tql` (ARGS: the content of
# CASE.args, shell-quoted, if it exists) and compare stdout, stderr and the
# exit status with CASE.out, CASE.err and CASE.rc (a missing file expects
# empty output or status 0).  "Run Time:" lines are normalised first.
#
#   tests/golden/run.sh            run (make check sets TRADB, TOP_SRCDIR)
#   tests/golden/run.sh --update   rewrite the expected files from the output
set -u

here=$(cd "$(dirname "$0")" && pwd)
TOP_SRCDIR=${TOP_SRCDIR:-$(cd "$here/../.." && pwd)}
TRADB=${TRADB:-$TOP_SRCDIR/tradb}
update=0
case "${1:-}" in
  --update) update=1 ;;
  "") ;;
  *) echo "usage: $0 [--update]" >&2; exit 2 ;;
esac
if [ ! -x "$TRADB" ]; then
  echo "golden: $TRADB is not an executable" >&2
  exit 99
fi

# Normalise the timer lines of file $1 (to stdout).
normalise() {
  sed -E 's/^Run Time: real [0-9.]+ user [0-9.]+ sys [0-9.]+$/Run Time: real R user U sys S/' "$1"
}

# Compare actual file $2 with expected file $1 (absent = empty) for case $3.
same() {
  local want=$1
  [ -f "$want" ] || want=/dev/null
  diff -u --label "$3 (expected)" --label "$3 (actual)" "$want" "$2"
}

# Write actual file $2 to expected file $1, or remove $1 if $2 is empty.
keep() {
  if [ -s "$2" ]; then cp "$2" "$1"; else rm -f "$1"; fi
}

pass=0
fail=0
for tql in "$here"/*.tql; do
  [ -e "$tql" ] || continue
  base=${tql%.tql}
  name=$(basename "$base")
  dir=$(mktemp -d "${TMPDIR:-/tmp}/tradb-golden.XXXXXX")
  if [ -d "$TOP_SRCDIR/tests/data" ]; then
    cp -R "$TOP_SRCDIR/tests/data/." "$dir/"
  fi
  # TRADB_ARGS (e.g. --workers EP1,EP2) go before each case's own args,
  # so the same cases run on the embedded default and on remote workers.
  # The default is two local workers whatever the machine's cores, so that
  # what depends on the number of workers (replicas) prints the same.
  read -r -a args <<< "${TRADB_ARGS:---local-workers 2}"
  if [ -f "$base.args" ]; then
    eval "args+=($(cat "$base.args"))"
  fi
  (cd "$dir" && "$TRADB" "${args[@]}" < "$tql" > out.raw 2> err.raw)
  echo $? > "$dir/rc.raw"
  normalise "$dir/out.raw" > "$dir/out"
  normalise "$dir/err.raw" > "$dir/err"
  [ "$(cat "$dir/rc.raw")" = 0 ] && : > "$dir/rc" || cp "$dir/rc.raw" "$dir/rc"

  if [ $update = 1 ]; then
    keep "$base.out" "$dir/out"
    keep "$base.err" "$dir/err"
    keep "$base.rc" "$dir/rc"
  fi
  ok=1
  same "$base.out" "$dir/out" "$name stdout" || ok=0
  same "$base.err" "$dir/err" "$name stderr" || ok=0
  same "$base.rc" "$dir/rc" "$name exit status" || ok=0
  if [ $ok = 1 ]; then
    pass=$((pass + 1))
  else
    echo "FAIL: $name"
    fail=$((fail + 1))
  fi
  rm -rf "$dir"
done

echo "golden: $pass passed, $fail failed"
[ $fail = 0 ]
