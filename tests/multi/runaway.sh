#!/usr/bin/env bash
# Runaway work: no kernel outlives the statement it computes for.
#  (a) a shell with local workers is killed (SIGKILL) mid-statement: its
#      workers (PR_SET_PDEATHSIG SIGTERM), which never hold its stdout,
#      are gone within the deadline;
#  (b) a `tradb --worker` given SIGTERM mid-kernel exits, status 0;
#  (c) a worker whose shell is killed mid-task cancels the task (its log
#      says so), goes idle, and answers the next shell;
#  (d) Ctrl-C (SIGINT) to a shell mid-kernel of one single chunk (one join
#      tuple: no tuple boundary to stop at) stops the shell and the kernel.
# The kernels run on the reference backend, over join tuples that take
# minutes each: before cancellation reached inside the kernels these
# processes computed on for minutes.  Each case prints how long the stop
# took; the deadline is generous for a loaded 2-core machine.
# Polls with deadlines; never sleeps a fixed time to wait for a state.
set -euo pipefail
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "runaway: FAIL: $*"
  for f in "$work"/*.log "$work"/db/workers/*.log; do [ -f "$f" ] && { echo "== $f"; tail -5 "$f"; }; done
  exit 1
}
passed=0
deadline_s=8

# A process that exists and is not a zombie (a killed shell's workers may
# not be reaped at once).
alive() {
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}
# CPU time (user + system) of a process so far, in clock ticks (1/100 s).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# Wait until each process given has computed for 0.5 s: its kernels run.
wait_busy() {
  local p end=$((SECONDS + 60))
  for p in "$@"; do
    local base; base=$(ticks "$p")
    until [ $(($(ticks "$p") - base)) -ge 50 ]; do
      alive "$p" || fail "process $p ended before its kernel could be stopped"
      [ $SECONDS -lt $end ] || fail "process $p not computing within 60 s"
      sleep 0.05
    done
  done
}
# True when process $1 used under 10% of a core over the next 0.2 s.
idle() {
  local a; a=$(ticks "$1")
  sleep 0.2
  [ $(($(ticks "$1") - a)) -le 2 ]
}
# Seconds since $1 (an $EPOCHREALTIME), to 0.01 s.
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'; }
# wait_gone CASE PID WHAT: until PID has exited, at most the deadline after
# t0 (when it was told to stop); sets took to the seconds since t0.
wait_gone() {
  local end=$((SECONDS + deadline_s))
  while alive "$2"; do
    [ $SECONDS -lt $end ] || fail "($1) $3 still running $(since "$t0") s after it was told to stop"
    sleep 0.02
  done
  took=$(since "$t0")
}

free_port() { /usr/bin/python3 "$TOP_SRCDIR/tests/multi/free_port.py"; } # below the kernel's own ports: see there

# A contraction over four labels with three operands: on the reference
# kernels one join tuple of 256-chunks is 256^4 steps, minutes of CPU.
# The three-factor products run as one join of all three (declared
# layout, set in each database), the long kernel to stop.
long='SUM(X[i,k] * X[k,l] * X[l,j])'

# ---- (a) local workers of a killed shell -------------------------------
db=$work/db
"$TRADB" --local-workers 2 "$db" <<'EOF' || fail "set-up failed"
SET layout = declared;
CREATE TENSOR X[512, 512] CHUNK [256, 256];
FILL X UNIFORM(-1, 1) SEED 3;
EOF
"$TRADB" --local-workers 2 --backend reference "$db" <<<"C[i,j] = $long;" > "$work/a.out" 2>&1 &
shell=$!
pids+=("$shell")
end=$((SECONDS + 30))
until [ "$(pgrep -f -- "--listen ipc://$db/workers/w" | wc -l)" -eq 2 ]; do
  [ $SECONDS -lt $end ] || fail "(a) local workers did not start"
  sleep 0.05
done
mapfile -t local_w < <(pgrep -f -- "--listen ipc://$db/workers/w")
# nor do they hold the shell's stdout: a reader of the shell's output
# would wait for them to end as well (one outlived a shell killed as it
# started its workers, and its reader never saw the end)
for p in "${local_w[@]}"; do
  [ "$(readlink "/proc/$p/fd/1")" = /dev/null ] || fail "(a) local worker $p writes to the shell's stdout"
done
wait_busy "${local_w[@]}"
t0=$EPOCHREALTIME
{ kill -9 "$shell"; wait "$shell"; } 2>/dev/null || true
for p in "${local_w[@]}"; do wait_gone a "$p" "local worker $p of the killed shell"; done
echo "runaway: (a) local workers gone $took s after SIGKILL of their shell"
passed=$((passed + 1))

# ---- a remote worker ---------------------------------------------------
ep=tcp://127.0.0.1:$(free_port)
"$TRADB" --worker --listen "$ep" --data "$work/w" --threads 1 --backend reference 2>> "$work/w.log" &
wpid=$!
pids+=("$wpid")
end=$((SECONDS + 20))
until grep -q "listening" "$work/w.log" 2>/dev/null; do
  alive "$wpid" || fail "worker did not start"
  [ $SECONDS -lt $end ] || fail "worker not listening within 20 s"
  sleep 0.05
done
rdb=$work/rdb
# X as above; Y in one chunk, so its product is one task of one join tuple.
"$TRADB" --workers "$ep" "$rdb" <<'EOF' || fail "remote set-up failed"
SET layout = declared;
CREATE TENSOR X[512, 512] CHUNK [256, 256];
FILL X UNIFORM(-1, 1) SEED 3;
CREATE TENSOR Y[256, 256] CHUNK [256, 256];
FILL Y UNIFORM(-1, 1) SEED 4;
EOF
# start_long OUT STATEMENT: a shell running it on the worker; sets shell.
start_long() {
  "$TRADB" --workers "$ep" "$rdb" <<<"$2" > "$work/$1.out" 2> "$work/$1.err" &
  shell=$!
  pids+=("$shell")
  wait_busy "$wpid"
}
# wait_idle CASE T0: until the worker computes no more; sets took to the
# seconds since T0.
wait_idle() {
  local end=$((SECONDS + deadline_s))
  until idle "$wpid"; do
    [ $SECONDS -lt $end ] || fail "($1) worker still computing $(since "$2") s later"
  done
  took=$(since "$2")
}

# ---- (c) the worker of a killed shell --------------------------------------
lost=$(grep -c "coordinator silent" "$work/w.log" || true)
start_long c "C[i,j] = $long;"
t0=$EPOCHREALTIME
{ kill -9 "$shell"; wait "$shell"; } 2>/dev/null || true
end=$((SECONDS + deadline_s))
until [ "$(grep -c "coordinator silent" "$work/w.log")" -gt "$lost" ]; do
  [ $SECONDS -lt $end ] || fail "(c) no cancel logged $(since "$t0") s after the shell was killed"
  sleep 0.02
done
logged=$(since "$t0")
wait_idle c "$t0"
echo "runaway: (c) worker of a killed shell: cancel logged after $logged s, idle after $took s"
out=$("$TRADB" --workers "$ep" "$rdb" <<<'s[] = SUM(Y[i,j] * 0 + 1); PRINT s;') \
  || fail "(c) the worker does not answer a new shell"
[ "$out" = $'s[] (f32)\n65536' ] || fail "(c) wrong result from the worker afterwards: '$out'"
passed=$((passed + 1))

# ---- (d) Ctrl-C mid-kernel of one chunk ---------------------------------
cancels=$(grep -c "cancelled by its shell:" "$work/w.log" || true)
start_long d "Z[i,j] = SUM(Y[i,k] * Y[k,l] * Y[l,j]);"
t0=$EPOCHREALTIME
kill -INT "$shell"
wait_gone d "$shell" "shell"
ended=$took
set +e; wait "$shell"; rc=$?; set -e
[ $rc -eq 1 ] && grep -q "interrupted" "$work/d.err" || fail "(d) interrupt not reported (status $rc): $(cat "$work/d.err")"
wait_idle d "$t0"
[ "$(grep -c "cancelled by its shell:" "$work/w.log")" -gt "$cancels" ] || fail "(d) the worker was not told to cancel"
echo "runaway: (d) Ctrl-C on one chunk: shell ended after $ended s, worker idle after $took s"
passed=$((passed + 1))

# ---- (b) SIGTERM to a worker mid-kernel ----------------------------------
start_long b "C[i,j] = $long;"
t0=$EPOCHREALTIME
kill -TERM "$wpid"
wait_gone b "$wpid" "worker"
echo "runaway: (b) worker gone $took s after SIGTERM"
set +e; wait "$wpid"; rc=$?; set -e
[ $rc -eq 0 ] || fail "(b) worker exit status $rc after SIGTERM, expected 0"
grep -q "stopping" "$work/w.log" || fail "(b) worker did not log its stop"
passed=$((passed + 1))

echo "runaway: $passed passed, 0 failed"
