"""Issue 18, items 6 and 7: host names OpenSSH would refuse never reach a ProxyCommand's shell, and every
name the console prints (config host names, run-directory names) reaches a terminal without escapes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from console.errors import UserError
from console.link.ssh import parse_host_spec
from tests.helpers.rel_util import cli, write_config


@pytest.mark.parametrize("host", ["i-0abc>x", "i-0abc<x", "a(b)", "a{b}", "a,b", "h\x1b]0;pwned\x07", "h\x7f",
                                  "h\u202e", "h*", "u@h?", "u;x@h"])
def test_host_names_openssh_refuses_are_refused(host):
    with pytest.raises(UserError, match="hostname contains invalid characters"):
        parse_host_spec(host)


@pytest.mark.parametrize("host", ["b200", "gpu-node.example.com", "ml@b200", "ml@10.0.0.7:2222", "[::1]:22",
                                  "i-0abc123def"])
def test_ordinary_host_names_still_accepted(host):
    assert parse_host_spec(host).name == host


def test_host_name_never_reaches_a_proxycommand_shell(tmp_path):
    """The usual jump-service pattern, ``ProxyCommand sh -c "… %h …"``: a host name with ``>`` would make that
    shell create a file. It is refused (exit 2, one line) before anything expands ``%h``."""
    canary = tmp_path / "x"
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text('Host *\n  ProxyCommand sh -c "echo connecting to %h; exit 1"\n  ConnectTimeout 3\n')
    (tmp_path / "empty.toml").write_text("")
    p = cli("--ssh-config", str(ssh_config), "--config", str(tmp_path / "empty.toml"), "status", "--timeout", "5",
            "--host", f"i-0abc>{canary}", timeout=60)
    assert not canary.exists(), "the host name reached the ProxyCommand's shell"
    assert p.returncode == 2 and "hostname contains invalid characters" in p.stderr, p.stdout + p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def test_config_host_names_and_run_dir_names_reach_a_terminal_clean(tmp_path):
    """A local host named with an escape sequence in the config, and a run directory whose name carries one:
    `status` and `sessions` text output on a terminal (a pty) hold no escape or control character."""
    import os
    import pty
    import select
    import subprocess

    runs = tmp_path / "runs"
    runs.mkdir()
    evil = "x\x1b]0;pwned\x07\x1b[2J"
    (runs / f"20261129-201530-gpu0-{evil}").mkdir()
    name = "loc\x1b]52;c;Zm9v\x07al"
    conf = tmp_path / "config.toml"
    write_config(conf, {"placeholder": {"python": sys.executable, "runs_dir": str(runs), "gpu_source": "none",
                                        "transport": "local"}})
    conf.write_text(conf.read_text().replace('"placeholder"', json.dumps(name)))  # TOML takes JSON's escapes
    repo = Path(__file__).resolve().parents[1]
    for sub in (["status"], ["sessions"]):
        master, slave = pty.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "console", "--config", str(conf), *sub, "--host", name],
                                stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=repo)
        os.close(slave)
        out = b""
        try:
            while True:
                r, _, _ = select.select([master], [], [], 60)
                if not r:
                    break
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
        finally:
            os.close(master)
            proc.wait(30)
        text = out.decode("utf-8", "replace")
        assert "\x1b" not in text and "\x07" not in text, (sub, text)
        assert proc.returncode == 0 and ("loc" in text if sub == ["status"] else text.strip()), (sub, text)
