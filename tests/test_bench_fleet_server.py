"""The fleet benchmark's stand-in SSH servers send per pushed sample what OpenSSH's sshd sends: one packet
(bench/fleet_server.py ``send_as_openssh``; asyncssh left alone puts an empty SSH_MSG_IGNORE before each, which
would charge the console two packets per sample). Counted by the console's own receive sequence number, over the
real sshd and over the stand-in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.links import open_link
from bench.simhost import start_stand_in, stop, write_sim_dir
from tests.helpers.heard import Heard
from tests.helpers.wait import await_until

REPO = Path(__file__).resolve().parents[1]
SAMPLES = 8


async def _packets_per_sample(link) -> float:
    heard = Heard(link)
    assert await await_until(lambda: len(heard.samples) >= 2, 20)
    n0, p0 = len(heard.samples), link.conn._recv_seq
    assert await await_until(lambda: len(heard.samples) >= n0 + SAMPLES, 20)
    return (link.conn._recv_seq - p0) / (len(heard.samples) - n0)


@pytest.mark.sshd
async def test_the_real_sshd_sends_one_packet_per_sample(sshd, tmp_path):
    link = await open_link(sshd.alias, sshd.ssh_config, tmp_path / "runs", gpu_source="sim",
                           sim_dir=write_sim_dir(tmp_path / "sim", 8), interval=0.2)
    try:
        assert 0.8 <= await _packets_per_sample(link) <= 1.3
    finally:
        await link.close()


async def test_the_stand_in_servers_send_one_packet_per_sample_too(tmp_path):
    d = tmp_path / "fleet"
    d.mkdir()
    srv = subprocess.Popen([sys.executable, "-m", "bench.fleet_server", str(d), "1"], cwd=REPO, stdin=subprocess.PIPE,
                           stdout=subprocess.DEVNULL, stderr=open(tmp_path / "server.log", "wb"), start_new_session=True)
    stand_in, link = None, None
    try:
        assert await await_until(lambda: (d / "ready").exists(), 30), (tmp_path / "server.log").read_text()
        sim = write_sim_dir(d / "host-00" / "sim", 8)
        if not json.loads((d / "ready").read_text())["pidns"]:
            stand_in = start_stand_in("serving-stand-in-00 --tp-size 8", sim)
        link = await open_link("fleet-00", d / "ssh_config", d / "host-00" / "runs", gpu_source="sim", sim_dir=sim,
                               interval=0.2)
        assert 0.8 <= await _packets_per_sample(link) <= 1.3
    finally:
        if link is not None:
            await link.close()
        if stand_in is not None:
            stop(stand_in)
        srv.stdin.close()
        try:
            srv.wait(10)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait(5)
