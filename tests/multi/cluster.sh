#!/usr/bin/env bash
# Three `tradb --worker` processes on loopback: the golden and numeric
# suites give the same results on them as on the embedded default; a worker
# killed with SIGKILL in the middle of a statement fails that statement
# naming it, within a bounded time; stored tensors stay readable from
# replicas and the next statement runs on the survivors; the restarted
# worker rejoins; garbage sent to a worker's port leaves it serving; a
# worker with CURVE keys refuses a peer without them and stays up.
# Polls with deadlines; never sleeps a fixed time to wait for a state.
TEST=cluster
source "$TOP_SRCDIR/tests/multi/lib.sh"

# Worker 2 may hold only 1 MiB of intermediates in memory: the suites
# below then also run with scratch chunks overflowing into files there.
for n in 0 1; do start_worker $n --threads 1; done
start_worker 2 --threads 1 --memory 1M
grep -q "memory 1 MiB" "$work/w2.log" || fail "--memory 1M not in effect"
workers="${ep[0]},${ep[1]},${ep[2]}"

# The same suites, on the three workers.
TRADB_ARGS="--workers $workers" bash "$TOP_SRCDIR/tests/golden/run.sh" > "$work/golden.out" 2>&1 \
  || { cat "$work/golden.out"; fail "golden suite differs on workers"; }
ok
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  mkdir "$work/num"
  TRADB_ARGS="--workers $workers" /usr/bin/python3 "$TOP_SRCDIR/tests/numeric/check.py" "$TRADB" \
    "$work/num" > "$work/numeric.out" 2>&1 || { cat "$work/numeric.out"; fail "numeric suite differs on workers"; }
  ok
  # random statements in random chunks, their moves over TCP
  mkdir "$work/plans"
  TRADB_ARGS="--workers $workers" /usr/bin/python3 "$TOP_SRCDIR/tests/numeric/plans.py" "$TRADB" \
    "$work/plans" 1 2 > "$work/plans.out" 2>&1 || { cat "$work/plans.out"; fail "random plans differ on workers"; }
  ok
fi

# Kill one worker in the middle of a statement.  synchronous = full: A's
# files are there when the set-up ends, and a statement's output chunks
# appear as files as they are made, which is how the steps below see a
# statement mid-way (under normal they stay in memory until it ends).
# layout = declared: the products below run as one join of their three
# factors in A's chunks, for seconds (split by the auto layout they end
# too soon to be caught mid-way).
db=$work/db
"$TRADB" --workers "$workers" "$db" <<'EOF2' || fail "set-up failed"
SET synchronous = full;
SET layout = declared;
CREATE TENSOR A[1536, 1536] CHUNK [256, 256];
FILL A ONES;
EOF2
before=$(find "$work"/w0 "$work"/w1 "$work"/w2 -name '*.chk' | wc -l)
"$TRADB" --workers "$workers" --backend reference "$db" \
  <<<'C[i,j] = SUM(A[i,k] * A[k,j] * A[k,j]);' > "$work/kill.out" 2> "$work/kill.err" &
shell=$!
pids+=("$shell")
deadline=$((SECONDS + 60))
until [ "$(find "$work"/w0 "$work"/w1 "$work"/w2 -name '*.chk' | wc -l)" -gt "$before" ] \
      && grep -q "hello" "$work/w1.log"; do
  kill -0 "$shell" 2>/dev/null || fail "statement ended before the worker could be killed"
  [ $SECONDS -lt $deadline ] || fail "statement did not start within 60 s"
  sleep 0.05
done
kill -9 "${wpid[1]}"
wait "${wpid[1]}" 2>/dev/null || true
deadline=$((SECONDS + 60))
while kill -0 "$shell" 2>/dev/null; do
  [ $SECONDS -lt $deadline ] || fail "shell still running 60 s after the worker died"
  sleep 0.05
done
set +e; wait "$shell"; rc=$?; set -e
if [ $rc -ne 0 ]; then
  grep -q "${ep[1]}" "$work/kill.err" || fail "the error does not name the dead worker: $(cat "$work/kill.err")"
fi
ok

# Stored data survives on the replicas; the next statement runs on the survivors.
out=$("$TRADB" --workers "$workers" "$db" <<<'s[] = SUM(A[i,j]); PRINT s; B[i,j] = A[i,j] * 3; PRINT B[0:1, 0:2];') \
  || fail "statements after the failure did not run on the survivors"
[ "$out" = $'s[] (f32)\n2.3593e+06\nB[0:1, 0:2] (f32)\n3  3' ] \
  || fail "wrong results on the survivors: '$out'"
ok

# The restarted worker rejoins.
port=${ep[1]##*:}
"$TRADB" --worker --listen "${ep[1]}" --data "$work/w1" --threads 1 2>> "$work/w1.log" &
wpid[1]=$!
pids+=("${wpid[1]}")
deadline=$((SECONDS + 30))
until "$TRADB" --workers "$workers" "$db" <<<'.workers' | grep -q "127.0.0.1:$port  *up"; do
  [ $SECONDS -lt $deadline ] || fail "restarted worker did not rejoin"
  sleep 0.2
done
# B was written while worker 1 was down: its missing replicas are made in
# the background now, as new chunk files.  The next step sees its own
# statement start by the chunk files appearing, so it waits for that first.
replicated() { "$TRADB" --workers "$workers" "$db" <<<'SHOW TENSORS;' | awk 'NR > 2 && $NF != 0 {short = 1} END {exit short}'; }
wait_until 60 "replication not restored after worker 1 rejoined" replicated
ok

# Ctrl-C (SIGINT) on a shell mid-statement: the workers are told to stop.
before=$(find "$work"/w0 "$work"/w1 "$work"/w2 -name '*.chk' | wc -l)
cancels=$(cat "$work"/w[012].log | grep -c "cancelled by its shell:" || true)
"$TRADB" --workers "$workers" --backend reference "$db" <<<'X[i,j] = SUM(A[i,k] * A[k,j] * A[k,j]);' 2> "$work/int.err" &
shell=$!
pids+=("$shell")
deadline=$((SECONDS + 60))
until [ "$(find "$work"/w0 "$work"/w1 "$work"/w2 -name '*.chk' | wc -l)" -gt "$before" ]; do
  kill -0 "$shell" 2>/dev/null || fail "statement ended before it could be interrupted"
  [ $SECONDS -lt $deadline ] || fail "statement did not start within 60 s"
  sleep 0.05
done
# A new chunk file is not always this statement's (a worker may still be
# writing one of an earlier statement), and a Ctrl-C that lands before the
# shell starts a statement is meant for the prompt and dropped: so, as a
# user would, press it again until the shell stops, within a deadline.
deadline=$((SECONDS + 30))
while kill -0 "$shell" 2>/dev/null; do
  kill -INT "$shell" 2>/dev/null || true
  [ $SECONDS -lt $deadline ] || fail "the shell did not stop on Ctrl-C within 30 s"
  sleep 0.2
done
set +e; wait "$shell"; rc=$?; set -e
[ $rc -eq 1 ] && grep -q "interrupted" "$work/int.err" || fail "interrupt not reported (exit status $rc): $(cat "$work/int.err")"
deadline=$((SECONDS + 10))
until [ "$(cat "$work"/w[012].log | grep -c "cancelled by its shell:")" -gt "$cancels" ]; do
  [ $SECONDS -lt $deadline ] || fail "no worker was told to cancel"
  sleep 0.05
done
ok

# Garbage on a worker's port: it keeps serving.
port0=${ep[0]##*:}
for i in 1 2 3; do
  (exec 3<>"/dev/tcp/127.0.0.1/$port0"; head -c 4096 /dev/urandom >&3; exec 3>&-) 2>/dev/null || true
done
out=$("$TRADB" --workers "$workers" "$db" <<<'PRINT B[0:1, 0:1];') || fail "worker stopped serving after garbage"
[ "$out" = $'B[0:1, 0:1] (f32)\n3' ] || fail "wrong result after garbage: '$out'"
kill -0 "${wpid[0]}" || fail "worker died on garbage"
ok

# CURVE: a worker with the cluster keys refuses a shell without them.
"$TRADB" --gen-keys "$work/keys" > /dev/null || fail "--gen-keys failed"
start_worker 3 --keys "$work/keys" --threads 1
set +e
"$TRADB" --workers "${ep[3]}" <<<'SHOW TENSORS;' > "$work/nokey.out" 2> "$work/nokey.err"
rc=$?
set -e
[ $rc -ne 0 ] || fail "a shell without keys was served"
kill -0 "${wpid[3]}" || fail "secured worker died"
out=$("$TRADB" --keys "$work/keys" --workers "${ep[3]}" <<<'CREATE TENSOR k[2]; FILL k ONES; PRINT k;') \
  || fail "a shell with the keys was refused"
[ "$out" = $'k[0:2] (f32)\n1  1' ] || fail "wrong result over CURVE: '$out'"
ok

# Without keys a worker only listens on loopback or ipc endpoints.
set +e
"$TRADB" --worker --listen "tcp://0.0.0.0:$(free_port)" --data "$work/open" 2> "$work/open.err"
rc=$?
set -e
[ $rc -ne 0 ] && grep -q -- "--keys" "$work/open.err" || fail "a worker listened on all interfaces without keys"
ok

# A worker that dies while a shell sits idle: that same shell's next
# statement runs on the survivors (queued heartbeats do not fool it).
mkfifo "$work/in"
"$TRADB" --workers "$workers" "$db" < "$work/in" > "$work/idle.out" 2> "$work/idle.err" &
idle=$!
pids+=("$idle")
exec 7> "$work/in"
echo "PRINT B[0:1, 0:1];" >&7
deadline=$((SECONDS + 30))
until [ "$(wc -l < "$work/idle.out")" -ge 2 ]; do
  [ $SECONDS -lt $deadline ] || fail "idle shell did not answer"
  sleep 0.05
done
kill -9 "${wpid[0]}"
wait "${wpid[0]}" 2>/dev/null || true
echo "E[i,j] = B[i,j] + 1; PRINT E[0:1, 0:2];" >&7
exec 7>&-
set +e; wait "$idle"; rc=$?; set -e
[ $rc -eq 0 ] || fail "statement after an idle worker death failed: $(cat "$work/idle.err")"
grep -q "^4  4$" "$work/idle.out" || fail "wrong result on the survivors: $(cat "$work/idle.out")"
ok

# SIGTERM: a clean exit, status 0, within a bounded time.
kill -TERM "${wpid[2]}"
deadline=$((SECONDS + 10))
while kill -0 "${wpid[2]}" 2>/dev/null; do
  [ $SECONDS -lt $deadline ] || fail "worker still running 10 s after SIGTERM"
  sleep 0.05
done
set +e; wait "${wpid[2]}"; rc=$?; set -e
[ $rc -eq 0 ] || fail "worker exited with status $rc on SIGTERM"
grep -q "stopping" "$work/w2.log" || fail "worker did not log its shutdown"
ok

# Local workers share the default 1/8 of memory for intermediates.
"$TRADB" --local-workers 2 "$work/local" -c "CREATE TENSOR Z[2];" || fail "local workers"
share=$(( $(getconf _PHYS_PAGES) * $(getconf PAGESIZE) / 8 / 2 / 1048576 ))
for n in 0 1; do
  grep -q "memory $share MiB" "$work/local/workers/w$n.log" || fail "local worker $n: not memory $share MiB"
done
ok

finish
