"""The per-launch supervisor, with real processes: detach, record, exit, cleanup, safety."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from console.host.launch import SUPERVISOR_BOOT, materialize
from console.link.protocol import shipped_sources
from tests.helpers.wait import holds_for, wait_until

REPO = Path(__file__).resolve().parents[1]
FAKE = REPO / "tests" / "helpers" / "fake_servers.py"
SECRET = "hf_s3cretTOKENvalue" + uuid.uuid4().hex[:8]


_LIB: list[str] = []


@pytest.fixture(autouse=True, scope="module")
def _shipped_package():
    """The shipped modules written as the agent writes them on a host (once for this module)."""
    _LIB.append(materialize(shipped_sources(), tempfile.mkdtemp(prefix="mtp-sup-lib-")))
    yield
    shutil.rmtree(os.path.dirname(_LIB.pop()), ignore_errors=True)


def sup_cmd(*args) -> list[str]:
    """The supervisor's command line as the agent runs it, from the written package."""
    return [sys.executable, "-c", SUPERVISOR_BOOT, _LIB[0], *[str(a) for a in args]]


# ------------------------------------------------------------------ /proc helpers

def stat_fields(pid):
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return data[data.rindex(")") + 2:].split()


def alive(pid) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def session_procs(session_id: str) -> list[int]:
    """Pids of our uid carrying MTPCONSOLE_SESSION=<session_id> (zombies excluded)."""
    marker = f"MTPCONSOLE_SESSION={session_id}".encode()
    uid = os.getuid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in env.split(b"\0") and alive(entry.name):
            found.append(int(entry.name))
    return found


def procs_mentioning(text: str) -> list[int]:
    """Live pids whose cmdline mentions ``text`` (e.g. a run dir: the supervisor's argv)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in cmd and alive(entry.name):
            found.append(int(entry.name))
    return found


def wait_for(predicate, timeout=5.0, what="condition"):
    """:func:`wait_until` that fails naming ``what`` when the bound passes."""
    value = wait_until(predicate, timeout)
    if not value:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")
    return value


# ------------------------------------------------------------------ launching

class Launch:
    def __init__(self, run_dir: Path, session_id: str, proc: subprocess.CompletedProcess):
        self.run_dir = run_dir
        self.session_id = session_id
        self.proc = proc

    def json(self, name):
        return json.loads((self.run_dir / name).read_text())

    @property
    def record(self):
        return self.json("record.json")

    def wait_exit(self, timeout=5.0):
        path = self.run_dir / "exit.json"
        wait_for(path.exists, timeout, "exit.json")
        return json.loads(path.read_text())

    @property
    def output(self) -> str:
        return (self.run_dir / "output.log").read_text()


@pytest.fixture
def launcher(tmp_path):
    launches: list[Launch] = []

    def launch(argv, env=None, gpus=(), cwd=None, prepare=None, stdin=None, spec_extra=None):
        session_id = "t-" + uuid.uuid4().hex[:12]
        run_dir = tmp_path / session_id
        run_dir.mkdir()
        spec = {"session_id": session_id, "argv": argv, "gpus": list(gpus), "cwd": cwd,
                "env_names": sorted(env or {})}
        spec.update(spec_extra or {})
        (run_dir / "spec.json").write_text(json.dumps(spec))
        if prepare:
            prepare(run_dir)
        line = stdin if stdin is not None else (json.dumps({"env": env or {}}) + "\n").encode()
        proc = subprocess.run(sup_cmd(run_dir), input=line,
                              capture_output=True, timeout=15)
        launch_ = Launch(run_dir, session_id, proc)
        launches.append(launch_)
        return launch_

    yield launch

    for launch_ in launches:  # teardown: kill what is left, bounded
        try:
            rec = launch_.record
        except (OSError, ValueError):
            rec = None
        if rec:
            if stat_fields(rec["pid"]) and int(stat_fields(rec["pid"])[19]) == rec["start_ticks"]:
                try:
                    os.killpg(rec["pgid"], signal.SIGKILL)
                except OSError:
                    pass
        for pid in session_procs(launch_.session_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        wait_until(lambda: not procs_mentioning(str(launch_.run_dir)), 5, step=0.05)


def fake(*args):
    return [sys.executable, str(FAKE), *[str(a) for a in args]]


# ------------------------------------------------------------------ tests

def test_import_has_no_side_effects(tmp_path):
    module = importlib.import_module("console.host.supervisor")
    assert callable(module.main)
    assert module.RUN_LOG == "output.log" and module.SESSION_ENV == "MTPCONSOLE_SESSION"
    from console.host import hostlib
    from console.link import protocol
    assert module.atomic_write_json is hostlib.atomic_write_json  # imported, not a copy
    for name in ("RUN_SPEC", "RUN_RECORD", "RUN_LOG", "RUN_SUPERVISOR_LOG", "RUN_STOP_REQUEST",
                 "RUN_EXIT", "SESSION_ENV"):
        assert vars(module)[name] is vars(hostlib)[name] is vars(protocol)[name]


def test_launch_records_a_detached_server(launcher):
    run = launcher(fake("chatty", 3), env={"HF_TOKEN": SECRET, "OTHER": "x y"}, gpus=[2, 5])
    assert run.proc.returncode == 0, run.proc.stderr
    rec = run.record
    from console.model import SupervisorRecord
    SupervisorRecord.model_validate(rec)
    pid, sup = rec["pid"], rec["supervisor_pid"]
    assert alive(pid) and alive(sup)
    assert int(stat_fields(pid)[19]) == rec["start_ticks"]
    assert int(stat_fields(sup)[19]) == rec["supervisor_start_ticks"]
    assert rec["pgid"] == pid == os.getpgid(pid)
    assert os.getpgid(sup) != rec["pgid"]
    assert int(stat_fields(sup)[1]) != os.getpid()  # detached: not our child
    assert os.getsid(sup) != os.getsid(0)
    assert rec["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()

    wait_for(lambda: run.output.count("\n") >= 3, what="3 lines in output.log")
    assert run.output.splitlines() == ["line 0", "line 1", "line 2"]

    env = dict(item.split(b"=", 1) for item in
               Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in item)
    assert env[b"CUDA_VISIBLE_DEVICES"] == b"2,5"
    assert env[b"MTPCONSOLE_SESSION"] == run.session_id.encode()
    assert env[b"HF_TOKEN"] == SECRET.encode()
    assert env[b"OTHER"] == b"x y"
    for p in (pid, sup):
        assert SECRET.encode() not in Path(f"/proc/{p}/cmdline").read_bytes()
    assert SECRET not in (run.run_dir / "supervisor.log").read_text()
    assert not (run.run_dir / "exit.json").exists()

    # the supervisor shrugs off SIGTERM/SIGHUP/SIGINT aimed at it
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        os.kill(sup, sig)
    assert holds_for(lambda: alive(sup) and alive(pid), 0.5)
    os.killpg(rec["pgid"], signal.SIGTERM)
    ex = run.wait_exit()
    assert ex["signal"] == signal.SIGTERM and ex["exit_code"] is None
    wait_for(lambda: not alive(sup), what="supervisor exit")


def test_caller_pipes_close_promptly(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "spec.json").write_text(json.dumps(
        {"session_id": "t-pipes-" + uuid.uuid4().hex[:8], "argv": fake("sleep", 20)}))
    proc = subprocess.Popen(sup_cmd(run_dir), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        started = time.monotonic()
        out, err = proc.communicate(input=b'{"env": {}}\n', timeout=3)
        assert time.monotonic() - started < 2.5
        assert proc.returncode == 0, err
        rec = json.loads((run_dir / "record.json").read_text())
        assert alive(rec["pid"]) and alive(rec["supervisor_pid"])
        # the daemon holds none of the caller's pipes
        fds = os.listdir(f"/proc/{rec['supervisor_pid']}/fd")
        targets = {os.readlink(f"/proc/{rec['supervisor_pid']}/fd/{fd}") for fd in fds}
        assert not any(t.startswith("pipe:") for t in targets), targets
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        try:
            rec = json.loads((run_dir / "record.json").read_text())
            os.killpg(rec["pgid"], signal.SIGKILL)
        except (OSError, ValueError):
            pass
    ex = json.loads(wait_for(lambda: (run_dir / "exit.json").exists() and
                             (run_dir / "exit.json").read_text(), what="exit.json"))
    assert ex["signal"] == signal.SIGKILL


def test_exit_code_is_recorded(launcher):
    run = launcher(fake("exit", 3))
    assert run.proc.returncode == 0
    ex = run.wait_exit()
    from console.model import ExitRecord
    ExitRecord.model_validate(ex)
    assert ex["exit_code"] == 3 and ex["signal"] is None and ex["error"] is None
    assert ex["stopped_by_operator"] is False and ex["leftovers_killed"] == []
    assert set(ex) == {"exit_code", "signal", "ended_at", "stopped_by_operator",
                       "oom_kill_before", "oom_kill_after", "leftovers_killed", "error"}
    oom = None
    for line in Path("/proc/vmstat").read_text().splitlines():
        if line.startswith("oom_kill "):
            oom = int(line.split()[1])
    if oom is not None:
        assert isinstance(ex["oom_kill_before"], int) and ex["oom_kill_before"] <= ex["oom_kill_after"]
    assert run.record["pid"] > 0


def test_sigkill_is_recorded_as_signal_9(launcher):
    run = launcher(fake("sleep", 20))
    os.kill(run.record["pid"], signal.SIGKILL)
    ex = run.wait_exit()
    assert ex["signal"] == 9 and ex["exit_code"] is None
    assert ex["stopped_by_operator"] is False


def test_stop_request_marks_stopped_by_operator(launcher):
    run = launcher(fake("sleep", 20))
    (run.run_dir / "stop-request.json").write_text(json.dumps({"at": time.time()}))
    os.killpg(run.record["pgid"], signal.SIGTERM)
    ex = run.wait_exit()
    assert ex["signal"] == 15 and ex["stopped_by_operator"] is True


def test_escaped_worker_is_killed_and_listed(launcher, tmp_path):
    pidfile = tmp_path / "worker.pid"
    run = launcher(fake("escape", pidfile))
    assert run.proc.returncode == 0
    ex = run.wait_exit()
    worker = int(pidfile.read_text())
    assert ex["exit_code"] == 0
    assert worker in ex["leftovers_killed"]
    assert run.record["pid"] not in ex["leftovers_killed"]
    wait_for(lambda: not alive(worker), what="worker gone")
    assert session_procs(run.session_id) == []
    wait_for(lambda: not procs_mentioning(str(run.run_dir)), what="supervisor gone")
    log = (run.run_dir / "supervisor.log").read_text()
    assert "child subreaper set" in log and "killed leftovers" in log


def test_orphans_are_reaped_while_the_server_runs(launcher):
    run = launcher(fake("orphan", 4))
    ex = run.wait_exit()
    assert ex["exit_code"] == 4 and ex["leftovers_killed"] == []
    assert "reaped orphan" in (run.run_dir / "supervisor.log").read_text()


def test_missing_binary_is_a_clear_error(launcher):
    run = launcher(["/nonexistent/mtp-no-such-server", "--port", "1"])
    assert run.proc.returncode == 1
    ex = run.wait_exit()
    assert ex["exit_code"] == 127
    assert ex["error"] == "cannot execute '/nonexistent/mtp-no-such-server': No such file or directory"
    assert run.output == ("mtpconsole-supervisor: cannot execute '/nonexistent/mtp-no-such-server': "
                          "No such file or directory\n")
    assert not (run.run_dir / "record.json").exists()
    wait_for(lambda: not procs_mentioning(str(run.run_dir)), what="no supervisor left")
    assert session_procs(run.session_id) == []


def test_missing_binary_on_path(launcher):
    run = launcher(["mtp-no-such-server-on-path"])
    ex = run.wait_exit()
    assert ex["exit_code"] == 127 and "mtp-no-such-server-on-path" in ex["error"]


def test_existing_output_log_is_refused(launcher):
    def prepare(run_dir):
        (run_dir / "output.log").write_text("old log\n")
    run = launcher(fake("chatty", 1), prepare=prepare)
    assert run.proc.returncode == 2
    ex = run.json("exit.json")
    assert ex["error"] == "output.log already exists: refusing to reuse a log"
    assert (run.run_dir / "output.log").read_text() == "old log\n"
    assert not (run.run_dir / "record.json").exists()
    assert session_procs(run.session_id) == []


def test_shell_metacharacters_arrive_literally(launcher, tmp_path):
    work = tmp_path / "cwd"
    work.mkdir()
    weird = ["; touch CANARY #", "$(touch CANARY)", "`touch CANARY`", "it's \"quoted\"",
             "line1\nline2", "&& touch CANARY", "| touch CANARY", "", "*", "$HOME"]
    run = launcher(fake("argv", *weird), cwd=str(work))
    ex = run.wait_exit()
    assert ex["exit_code"] == 0, run.output
    assert json.loads(run.output.splitlines()[0]) == weird
    for where in (work, run.run_dir, tmp_path, REPO):
        assert not (where / "CANARY").exists()


@pytest.mark.parametrize("spec_extra, stdin, message", [
    ({"argv": []}, None, "argv must be a non-empty list"),
    ({"argv": "python -V"}, None, "argv must be a non-empty list"),
    ({"argv": ["python", "a\x00b"]}, None, "NUL"),
    ({"argv": ["python", 3]}, None, "must be a string"),
    ({"session_id": ""}, None, "session_id"),
    ({"gpus": ["0,1"]}, None, "invalid GPU"),
    ({"cwd": "/nonexistent/dir"}, None, "not a directory"),
    ({}, b"not json\n", "not valid JSON"),
    ({}, b"\xff\xfe\n", "not valid UTF-8"),
    ({}, b"", "no env line"),
    ({}, b'{"env": {"A": 1}}\n', "must be a string"),
    ({}, b'{"env": {"A=B": "x"}}\n', "contains '='"),
    ({}, b'{"env": ["A"]}\n', "env must be an object"),
])
def test_bad_input_is_a_clear_error(launcher, spec_extra, stdin, message):
    run = launcher(fake("exit", 0), spec_extra=spec_extra, stdin=stdin)
    assert run.proc.returncode == 2
    assert b"Traceback" not in run.proc.stderr
    assert message in run.json("exit.json")["error"]
    assert message.encode() in run.proc.stderr
    assert not (run.run_dir / "output.log").exists()
    assert not (run.run_dir / "record.json").exists()


def test_bad_spec_file_and_run_dir(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "spec.json").write_bytes(b"\x00garbage")
    proc = subprocess.run(sup_cmd(run_dir), input=b'{"env":{}}\n',
                          capture_output=True, timeout=10)
    assert proc.returncode == 2 and b"Traceback" not in proc.stderr
    assert "spec.json" in json.loads((run_dir / "exit.json").read_text())["error"]

    proc = subprocess.run(sup_cmd(tmp_path / "missing"),
                          input=b'{"env":{}}\n', capture_output=True, timeout=10)
    assert proc.returncode == 2 and b"does not exist" in proc.stderr
    proc = subprocess.run(sup_cmd(), input=b"", capture_output=True, timeout=10)
    assert proc.returncode == 2 and b"usage" in proc.stderr


def test_huge_env_line_is_refused(launcher):
    run = launcher(fake("exit", 0), stdin=b"x" * (4 * 1024 * 1024 + 10))
    assert run.proc.returncode == 2
    assert "longer than" in run.json("exit.json")["error"]


def test_supervisor_records_member_exits_without_an_agent(launcher, tmp_path):
    """No console attached: the supervisor itself records which worker died, how, and on which GPU."""
    helper = REPO / "tests" / "helpers" / "retitle.py"
    go = tmp_path / "go"
    go.write_text("")
    run = launcher([sys.executable, str(helper), "launcher", str(go), "0", "sglang::scheduler_TP0",
                    "sglang::scheduler_TP1"], gpus=[0, 1])
    assert run.proc.returncode == 0, run.proc.stderr
    line = wait_for(lambda: next((x for x in run.output.splitlines() if x.startswith("children ")), None),
                    what="the helper's children")
    tracker, tp0, tp1 = [int(x) for x in line.split()[1:]]
    wait_for(lambda: f"member {tp1}: worker sglang::scheduler_TP1 (gpus 1)" in
             (run.run_dir / "supervisor.log").read_text(), what="the supervisor to see the retitled worker")
    os.kill(tp1, signal.SIGKILL)

    def exits():
        path = run.run_dir / "exits.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    (e,) = wait_for(lambda: [x for x in exits() if x["pid"] == tp1], what="the worker's exit line")
    assert e["signal"] == signal.SIGKILL and e["role"] == "worker" and e["tp_rank"] == 1 and e["gpus"] == [1]
    assert e["source"] == "supervisor" and e["session_id"] == run.session_id and not e["after_stop_request"]
    os.killpg(run.record["pgid"], signal.SIGTERM)
    run.wait_exit()
    from console.host.watch import first_abnormal_exit, merge_exits
    first = first_abnormal_exit(merge_exits(exits()))
    assert first["pid"] == tp1
