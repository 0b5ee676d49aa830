"""A real orphan for tests: a process titled like an SGLang worker (``sglang::scheduler``), re-parented to
init or the nearest subreaper by a double fork, in its own session, holding simulated GPU memory.

Run as ``python orphan_proc.py SIM_DIR GPU MIB PIDFILE [TITLE] [PORT]``: the first child forks the
worker and exits, so the worker's launcher is gone; the worker re-executes itself with argv[0]
set to TITLE (what ``setproctitle`` does for real workers), writes its alloc file and its pid, may
listen on PORT, and lives at most 120 s. Stdlib only.
"""

import os
import socket
import sys
import time


def worker(sim_dir, gpu, mib, pidfile, port):
    sys.path.insert(0, os.environ.get("ORPHAN_REPO", ""))
    from console.sim.simgpu import write_alloc

    write_alloc(sim_dir, os.getpid(), gpu, mib)
    srv = None
    if port:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", port))
        srv.listen(4)
    with open(pidfile + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(pidfile + ".tmp", pidfile)
    end = time.time() + 120
    while time.time() < end:
        time.sleep(0.2)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _, _, sim_dir, gpu, mib, pidfile, port = sys.argv
        worker(sim_dir, int(gpu), int(mib), pidfile, int(port))
        return
    sim_dir, gpu, mib, pidfile = sys.argv[1:5]
    title = sys.argv[5] if len(sys.argv) > 5 else "sglang::scheduler"
    port = sys.argv[6] if len(sys.argv) > 6 else "0"
    if os.fork() == 0:  # the "launcher": starts the worker and dies
        os.setsid()
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.execv(sys.executable, [title, os.path.abspath(__file__), "--worker", sim_dir, gpu, mib, pidfile, port])
        os._exit(0)
    os.wait()


if __name__ == "__main__":
    main()
