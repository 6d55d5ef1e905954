#!/usr/bin/env bash
# A shell that cannot authenticate to a CURVE worker (no keys, or another
# cluster's keys) says so within the heartbeat liveness window, not after
# a long timeout, and the worker keeps serving shells that hold the keys.
TEST=auth; source "$TOP_SRCDIR/tests/multi/lib.sh"
"$TRADB" --gen-keys "$work/keys" > /dev/null || fail "--gen-keys failed"
"$TRADB" --gen-keys "$work/other" > /dev/null || fail "--gen-keys failed"
start_worker 0 --keys "$work/keys" --threads 1
for k in none other; do
  args=()
  [ $k = other ] && args=(--keys "$work/other")
  t0=$(date +%s%N)
  set +e
  "$TRADB" "${args[@]}" --workers "${ep[0]}" <<<'SHOW TENSORS;' > /dev/null 2> "$work/$k.err"
  rc=$?
  set -e
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ $rc -ne 0 ] || fail "a shell with keys '$k' was served"
  grep -qi "curve\|key" "$work/$k.err" || fail "keys '$k': the error does not say it is about keys: '$(cat "$work/$k.err")'"
  [ $ms -lt 5000 ] || fail "keys '$k': the refusal took $ms ms"
  echo "$TEST: refused ($k keys) in $ms ms"
done
ok
out=$("$TRADB" --keys "$work/keys" --workers "${ep[0]}" <<<'CREATE TENSOR k[2]; FILL k ONES; PRINT k;') \
  || fail "a shell with the keys was refused"
[ "$out" = $'k[0:2] (f32)\n1  1' ] || fail "wrong result over CURVE: '$out'"
ok
finish
