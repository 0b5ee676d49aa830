"""Processes that retitle themselves the way SGLang's do (setproctitle), for the agent's tests.

``set_title(title)`` overwrites this process's argv area in place (through /proc/self/mem, as
setproctitle does) and its comm (prctl PR_SET_NAME): afterwards /proc/<pid>/cmdline reads
``title`` followed by NUL padding, i.e. argv ``[title, '', '', ...]``, exactly like a real
``sglang::scheduler``.

Run as a launcher::

    python3 retitle.py launcher TITLE_FILE DELAY_S CHILD_TITLE [CHILD_TITLE ...]

It retitles itself ``python3 -m sglang.launch_server ...`` unless told otherwise, starts one
multiprocessing-spawn-style child per CHILD_TITLE (``python -B -c 'from multiprocessing.spawn import
spawn_main ...' --multiprocessing-fork``) that retitles to CHILD_TITLE after DELAY_S seconds or when
TITLE_FILE appears, and a ``multiprocessing.resource_tracker``-style child; then it waits to be killed.
Stdlib only.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time

PR_SET_NAME = 15
HERE = os.path.dirname(os.path.abspath(__file__))


def set_title(title: str, clobber_env: bool = True) -> None:
    """Overwrite the argv area with ``title`` + NULs (the kernel then reports the padding as empty args).

    Like setproctitle, which takes the environ area (just after argv) for room: with ``clobber_env``
    /proc/<pid>/environ reads as NULs afterwards (the process's own os.environ is a copy and survives).
    """
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    arg_start, arg_end = int(fields[45]), int(fields[46])  # fields 48 and 49 of stat(5)
    env_start, env_end = int(fields[47]), int(fields[48])  # fields 50 and 51
    room = arg_end - arg_start
    data = title.encode()[: room - 1]
    with open("/proc/self/mem", "r+b", buffering=0) as mem:
        mem.seek(arg_start)
        mem.write(data + b"\0" * (room - len(data)))
        if clobber_env and env_end > env_start:
            mem.seek(env_start)
            mem.write(b"\0" * (env_end - env_start))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_NAME, ctypes.c_char_p(title.encode()[:15]), 0, 0, 0)


def child(title_file: str, delay: float, title: str) -> None:
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline and not os.path.exists(title_file):
        time.sleep(0.01)
    set_title(title)
    time.sleep(120)


CHILD_CODE = ("from multiprocessing.spawn import spawn_main; import sys; sys.path.insert(0, %r); "
              "import retitle; retitle.child(sys.argv[1], float(sys.argv[2]), sys.argv[3])")
TRACKER_CODE = "from multiprocessing.resource_tracker import main; import time; time.sleep(120)"


def launcher(title_file: str, delay: float, titles: list[str]) -> None:
    # a real launcher is not retitled: its environ stays readable
    set_title("python3 -m sglang.launch_server --model-path /models/tiny --tp %d --port 0" % len(titles),
              clobber_env=False)
    kids = [subprocess.Popen([sys.executable, "-B", "-c", TRACKER_CODE])]
    for t in titles:
        # argv padded like a real spawn child, so the retitle has room (real ones carry their fds here)
        kids.append(subprocess.Popen([sys.executable, "-B", "-c", CHILD_CODE % HERE, title_file, str(delay), t,
                                      "--multiprocessing-fork", "x" * 200]))
    print("children", " ".join(str(k.pid) for k in kids), flush=True)
    time.sleep(120)


if __name__ == "__main__":
    if sys.argv[1] == "launcher":
        launcher(sys.argv[2], float(sys.argv[3]), sys.argv[4:])
