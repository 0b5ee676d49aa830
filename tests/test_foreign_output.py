"""A hand-started server's output through /proc/<pid>/fd/1 on the `local` host: read when its stdout is a regular
file (nohup … > file), refused with the reason when it is a pipe, and refused when the process is gone or is
another one now (pid + start time)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from console.config import HostConfig
from console.link.link import HostLink
from console.link.ssh import HostSpec
from console.ops.foreign_log import NoOutput, read_foreign_output
from tests.helpers.rel_util import kill_quietly
from tests.helpers.wait import await_until

CHATTY = "import sys, time\nfor i in range(3): print('line', i, flush=True)\ntime.sleep(60)"


@pytest.fixture
async def link(runs_dir):
    lk = HostLink(HostSpec(name="local", local=True),
                  HostConfig(python=sys.executable, runs_dir=str(runs_dir), gpu_source="none"), interval=0.5)
    await lk.open()
    yield lk
    await lk.close()


async def test_stdout_file_is_read_and_a_pipe_is_refused(link, tmp_path):
    log = tmp_path / "server.log"
    with open(log, "wb") as f:
        to_file = subprocess.Popen([sys.executable, "-c", CHATTY], stdout=f, stderr=subprocess.STDOUT)
    to_pipe = subprocess.Popen([sys.executable, "-c", CHATTY], stdout=subprocess.PIPE)
    try:
        to_pipe.stdout.readline()
        assert await await_until(lambda: log.read_text().count("line") == 3, 10)
        proc = await link.client.proc(to_file.pid)
        assert proc is not None
        where, lines = await read_foreign_output(link, to_file.pid, proc.start_ticks)
        assert where == str(log) and lines == ["line 0", "line 1", "line 2"]
        with pytest.raises(NoOutput, match="not a file"):
            await read_foreign_output(link, to_pipe.pid, None)
        with pytest.raises(NoOutput, match="gone"):
            await read_foreign_output(link, to_file.pid, proc.start_ticks + 1)
    finally:
        kill_quietly([to_file.pid, to_pipe.pid])
        to_file.wait(5)
        to_pipe.wait(5)
