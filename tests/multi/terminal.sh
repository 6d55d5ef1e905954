#!/usr/bin/env bash
# What only a terminal shows, driven on a pseudo-terminal (pty_shell.py):
# an error's caret under its token and "did you mean" for a tensor name;
# completion of tensor names after DESCRIBE; the progress line of a
# statement running over a second; and a statement typed over several
# lines kept as one history entry, recalled whole by one Up in the next
# session (the history file read back with its timestamps); the
# continuation prompt inside a quoted string; exit typed alone, and no
# progress line from a short close.
TEST=terminal
source "$TOP_SRCDIR/tests/multi/lib.sh"
pty() { /usr/bin/python3 "$TOP_SRCDIR/tests/multi/pty_shell.py" "$1" -- "$TRADB" --backend reference "$work/db"; }
export TRADB_HISTORY=$work/history

# The product below runs over a second as one join (layout = declared,
# some 7 s on the reference kernels); split into pairwise products by the
# layout optimizer it takes under one on a quiet machine, too short for a
# progress line.
cat > "$work/first" <<'EOS'
expect tradb>
send CREATE TENSOR Alpha[1024,1024] CHUNK [256,256];\n
expect tradb>
send FILL Alpha ONES;\n
expect tradb>
send PRINT Alpah;\n
expect did you mean Alpha\?
expect tradb>
send y[] = SUM(Alpha[i,j] +* 2);\n
expect \+\* 2\);\r?\n +\^
expect tradb>
send DESCRIBE Alp\t;\n
expect Alpha \[1024, 1024\]|Alpha.*1024
expect tradb>
send .progress on\n
expect tradb>
send SET layout = declared;\n
expect tradb>
send C[i,j] = SUM(Alpha[i,k] * Alpha[k,j] * Alpha[k,j]);\n
expect \d+/\d+ tasks +\d+%
expect tradb>
send x[] = SUM(\n
send Alpha[i,j]);\n
expect tradb>
EOS
pty "$work/first" > "$work/first.out" || { cat "$work/first.out"; fail "first session"; }
ok

cat > "$work/second" <<'EOS'
expect tradb>
send DROP TENSOR x;\n
expect tradb>
send \x1b[A\x1b[A
expect x\[\] = SUM\(.*Alpha\[i,j\]\);
send \n
expect tradb>
send PRINT x;\n
expect 1\.04\d*e\+06
expect tradb>
EOS
pty "$work/second" > "$work/second.out" || { cat "$work/second.out"; fail "history across sessions"; }
ok

# A line ending inside a quoted string: the prompt says so.
cat > "$work/third" <<'EOS'
expect tradb>
send LOAD q FROM 'no\n
expect '\.\.\.>
send such.npy';\n
expect cannot open
expect tradb>
EOS
pty "$work/third" > "$work/third.out" || { cat "$work/third.out"; fail "the prompt inside a string"; }
ok

# Leaving by a habit word, with no statement run: the close's work (its
# replica repair, the workers' writing), well under a second here, shows
# no progress line; it showed one counting its seconds from the machine's
# boot ("10/12 tasks 83% 85369.2 s").
cat > "$work/fourth" <<'EOS'
expect tradb>
send .progress on\n
expect tradb>
send exit\n
exits
absent tasks
EOS
pty "$work/fourth" > "$work/fourth.out" || { cat "$work/fourth.out"; fail "the close's progress"; }
ok
finish
