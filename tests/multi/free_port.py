#!/usr/bin/env python3
"""Print a loopback TCP port that is free now, for a test's worker.

It is taken below the range the kernel hands out on its own
(ip_local_port_range, 32768 and up by default).  A port from that range,
once its worker is stopped, can be given by bind(0) to another test running
beside this one, or become the source port of a connection a shell opens
to that same port, so that the shell, reconnecting to a stopped worker,
is connected to itself and takes its own pings for the worker's answers.
"""
import random
import socket
import sys

with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
    lo = int(f.read().split()[0])
for _ in range(500):
    port = random.randrange(10000, max(lo, 10001))
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    sys.exit(0)
sys.exit("free_port: no free port below %d in 500 tries" % lo)
