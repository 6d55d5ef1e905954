#!/usr/bin/env bash
# Local workers (ipc://) hold their big chunks in shared memory, and each
# output's replica on the other worker is the same pages, mapped.  When a
# statement replaces a tensor, both let go of the old chunks, in either
# order; the memory must come back to the worker that made the chunk,
# whose next outputs are those chunks' size, not to the one that mapped
# it.  (When the last to let go kept it, one worker made every output of
# a repeated statement in fresh memory, and the other's pool filled with
# memory it never used.)
# Two ipc:// workers, an elementwise statement run 24 times on a tensor of
# eight 4 MiB chunks, each output replicated on both; each worker makes
# its four chunks a pass, 16 MiB.  Each stopped worker logs the memory
# its chunks were made in: new shared memory must stay within 4 passes'
# worth (it was all 24 before), and the rest come from the pool.
# Polls with deadlines; never sleeps a fixed time to wait for a state.
TEST=shared_pool
source "$TOP_SRCDIR/tests/multi/lib.sh"

ep[0]="ipc://$work/s0.ipc"
ep[1]="ipc://$work/s1.ipc"
for n in 0 1; do start_worker $n --memory 512M --threads 1; done
{
  echo "SET replication = 2;"
  echo "CREATE TENSOR X[8192, 1024] CHUNK [1024, 1024] TYPE f32;"
  echo "FILL X ONES;"
  for i in $(seq 1 24); do echo "Y[i,j] = X[i,j] + $i;"; done
  echo "s[] = SUM(Y[i,j]);"
  echo "PRINT s;"
} | "$TRADB" --workers "${ep[0]},${ep[1]}" "$work/db" > "$work/out" 2>&1 ||
  { cat "$work/out"; fail "the statements failed"; }
# 8192 * 1024 * 25
grep -q "2.09715e+08" "$work/out" || { cat "$work/out"; fail "SUM(Y) is not 25 * 8192 * 1024"; }
ok

for n in 0 1; do kill -TERM "${wpid[$n]}"; done
exited() { ! kill -0 "${wpid[0]}" 2>/dev/null && ! kill -0 "${wpid[1]}" 2>/dev/null; }
wait_until 60 "both workers exited" exited
for n in 0 1; do
  line=$(grep -o "chunks made in [0-9]* MiB of new shared memory and [0-9]* MiB from the pool" \
    "$work/w$n.log") || fail "worker $n logged no use of its pool"
  fresh=$(echo "$line" | awk '{print $4}')
  pooled=$(echo "$line" | awk '{print $11}')
  echo "$TEST: worker $n: $line"
  [ "$fresh" -le 64 ] || fail "worker $n made $fresh MiB of chunks in new memory (at most 64: 4 passes)"
  [ "$pooled" -ge 256 ] || fail "worker $n took only $pooled MiB from its pool (20 passes are 320)"
done
ok
finish
