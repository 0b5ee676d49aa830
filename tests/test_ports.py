"""``console.host.ports``: free ports outside the ephemeral range, with their derived ports free too."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys

from console.host import ports
from console.ops.group.probe import PROGRAM


def test_a_chosen_port_lies_below_the_ephemeral_range_with_its_offsets_free():
    lo, _ = ports.ephemeral_range()
    for _ in range(20):
        p = ports.listen_port(range(6), host="127.0.0.1")
        assert p is not None and ports.LOWEST <= p and p + 5 < lo
        assert all(ports.bindable(p + d, "127.0.0.1") for d in range(6))


def test_a_taken_port_in_the_block_moves_the_choice():
    first = ports.listen_port(range(4), host="127.0.0.1", rng=random.Random(7))
    assert first is not None
    with socket.socket() as s:  # another listener takes first + 2: the same draw must not be offered again
        s.bind(("127.0.0.1", first + 2))
        s.listen()
        again = ports.listen_port(range(4), host="127.0.0.1", rng=random.Random(7))
        assert again is not None and not (again <= first + 2 <= again + 3)


def test_an_unreadable_range_file_reads_as_linuxs_default(tmp_path):
    assert ports.ephemeral_range(str(tmp_path / "missing")) == (32768, 60999)
    (tmp_path / "r").write_text("garbage\n")
    assert ports.ephemeral_range(str(tmp_path / "r")) == (32768, 60999)
    (tmp_path / "r").write_text("40000\t50000\n")
    assert ports.ephemeral_range(str(tmp_path / "r")) == (40000, 50000)


def test_the_group_probe_ships_the_same_chooser():
    r = subprocess.run([sys.executable, "-c", PROGRAM, json.dumps({"free_port": True, "derived": [1, 2, 3, 4, 5]})],
                       capture_output=True, text=True, timeout=30)
    out = json.loads(r.stdout)
    lo, _ = ports.ephemeral_range()
    assert ports.LOWEST <= out["free_port"] and out["free_port"] + 5 < lo
