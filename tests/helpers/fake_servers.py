"""Small stdlib-only stand-in servers, run as real processes by the tests.

Usage: ``python fake_servers.py MODE [ARGS...]``. Every mode ends by itself (bounded sleeps),
so a server that a failing test forgets still disappears within a minute.

Modes:
  chatty N        print N numbered lines, then sleep (up to 30 s)
  sleep [S]       sleep S seconds (default 30)
  exit CODE       exit with CODE at once
  argv            print the arguments after ``argv`` as one JSON line, exit 0
  escape FILE     start a worker in a new session (setsid), write its pid to FILE, exit 0
  worker          sleep up to 30 s (the escaped worker)
  orphan CODE     double-fork a short-lived grandchild (orphaned while we run), sleep 0.5 s,
                  exit with CODE
"""

import json
import os
import subprocess
import sys
import time

MAX_SLEEP_S = 30.0


def bounded_sleep(seconds):
    """Sleep at most MAX_SLEEP_S."""
    time.sleep(min(float(seconds), MAX_SLEEP_S))


def main(args):
    mode = args[0] if args else ""
    if mode == "chatty":
        for i in range(int(args[1])):
            print("line %d" % i, flush=True)
        bounded_sleep(MAX_SLEEP_S)
        return 0
    if mode == "sleep":
        bounded_sleep(args[1] if len(args) > 1 else MAX_SLEEP_S)
        return 0
    if mode == "exit":
        return int(args[1])
    if mode == "argv":
        print(json.dumps(args[1:]), flush=True)
        return 0
    if mode == "escape":
        worker = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker"],
                                  start_new_session=True)
        tmp = args[1] + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(worker.pid))
        os.rename(tmp, args[1])
        print("worker %d started" % worker.pid, flush=True)
        time.sleep(0.2)
        os._exit(0)  # no wait(): the worker outlives us
    if mode == "orphan":
        middle = os.fork()
        if middle == 0:
            if os.fork() == 0:
                time.sleep(0.1)
                os._exit(0)
            os._exit(0)
        os.waitpid(middle, 0)
        time.sleep(0.5)
        return int(args[1])
    if mode == "worker":
        bounded_sleep(MAX_SLEEP_S)
        return 0
    sys.stderr.write("unknown mode %r\n" % mode)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
