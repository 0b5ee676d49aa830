"""One simulated host's process table: run as pid 1 of its own PID namespace (``unshare -pf --mount-proc``).

    python -m bench.ns_host SIM_DIR TITLE -- AGENT_ARGV...

Starts the host's serving stand-in (``bench.simhost.start_stand_in``: its pid, as this namespace numbers it, goes
into the sim GPUs' alloc files), then becomes the agent (exec, stdin/stdout still the SSH channel's). Inside, /proc
lists this host's processes only, so each agent's scan costs what it would on a machine of its own instead of
growing with the fleet (N agents on one shared /proc cost N²). When the agent (pid 1) ends, the kernel ends the
stand-in with it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bench.simhost import start_stand_in


def main(argv: list[str]) -> None:
    sim_dir, title, sep, agent = argv[0], argv[1], argv[2], argv[3:]
    if sep != "--" or not agent:
        sys.exit("usage: python -m bench.ns_host SIM_DIR TITLE -- AGENT_ARGV...")
    for f in (Path(sim_dir) / "alloc").glob("*.json"):  # a previous agent's stand-in died with its namespace
        f.unlink()
    start_stand_in(title, Path(sim_dir))
    os.execvp(agent[0], agent)


if __name__ == "__main__":
    main(sys.argv[1:])
