#!/usr/bin/python3
"""Drive the tradb shell on a pseudo-terminal, for what only a terminal
shows: the caret under an error, the progress line, completion, history.

    pty_shell.py SCRIPT -- TRADB [ARGS...]

SCRIPT is a file of steps, one a line:
    send TEXT       type TEXT (Python escapes: \\n Enter, \\t Tab, \\x1b[A Up)
    expect REGEX    wait (deadline: 60 s) until the output since the last
                    expect matches REGEX (Python re, DOTALL), consumed
                    through the match
    absent REGEX    the output so far since the last expect has no match
    exits           wait (deadline: 60 s) until the shell exits with status
                    0, reading all it writes (for an absent after it)
    run COMMAND     run COMMAND with /bin/sh (what another program does
                    meanwhile, such as filling a disk); it must succeed
    # ...           a comment
The shell's output (stdout and stderr: one terminal) is read as it comes;
a step that fails prints what was read and exits 1.  At the end the shell
gets Ctrl-D and must exit within the deadline (unless it has exited).
"""
import os
import pty
import re
import select
import subprocess
import sys
import time

DEADLINE_S = 60


def main():
    script = sys.argv[1]
    argv = sys.argv[sys.argv.index("--") + 1:]
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm"
        os.environ["COLUMNS"] = "100"
        os.execv(argv[0], argv)
    buf = b""

    def read_some(timeout):
        nonlocal buf
        r, _, _ = select.select([fd], [], [], timeout)
        if not r:
            return False
        try:
            data = os.read(fd, 65536)
        except OSError:
            return False
        buf += data
        return bool(data)

    def fail(why):
        sys.stdout.write("pty_shell: %s\n--- output read:\n%r\n" % (why, buf.decode("utf-8", "replace")))
        try:
            os.kill(pid, 9)
        except OSError:
            pass
        sys.exit(1)

    exited = False
    for n, line in enumerate(open(script, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        op, _, arg = line.partition(" ")
        if op == "send":
            os.write(fd, arg.encode("utf-8").decode("unicode_escape").encode("latin-1"))
        elif op == "expect":
            rx = re.compile(arg.encode("utf-8"), re.S)
            end = time.time() + DEADLINE_S
            while not rx.search(buf):
                if time.time() > end:
                    fail("line %d: no match for %s within %d s" % (n, arg, DEADLINE_S))
                read_some(0.1)
            m = rx.search(buf)
            buf = buf[m.end():]
        elif op == "exits":
            end = time.time() + DEADLINE_S
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                if time.time() > end:
                    fail("line %d: the shell did not exit within %d s" % (n, DEADLINE_S))
                read_some(0.1)
            while read_some(0.05):
                pass
            if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
                fail("line %d: the shell exited with status %r" % (n, status))
            exited = True
        elif op == "run":
            if subprocess.run(arg, shell=True).returncode != 0:
                fail("line %d: %s failed" % (n, arg))
        elif op == "absent":
            while read_some(0.05):
                pass
            if re.search(arg.encode("utf-8"), buf, re.S):
                fail("line %d: %s is there" % (n, arg))
        else:
            fail("line %d: unknown step %s" % (n, op))
    if exited:
        sys.exit(0)
    os.write(fd, b"\x04")
    end = time.time() + DEADLINE_S
    while time.time() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            sys.exit(0 if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else 1)
        read_some(0.1)
    fail("the shell did not exit after Ctrl-D")


main()
