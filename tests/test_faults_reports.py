"""Issue 25, items 3, 4, 7 and part of 8: hostile text in a report, hostile report targets, hostile input files.

Every report test runs the real CLI (``python3 -m console report``) as a subprocess against the ``local`` host
on simulated GPUs: the real agent reads a run directory planted in a real runs directory (a spec, an
``output.log`` holding what a hostile or unlucky server could print, an ``exit.json``), the GPU sample ring
and the console's own audit log, and the report is written to a real file. ``plan``, ``--config`` and
``check`` run as real CLI processes too, on real FIFOs, devices and files. The full-disk case mounts a small
tmpfs (we run as root); where ``mount`` is refused it mounts one inside ``unshare -rm``; each run says which.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.commands.report import parse_age
from console.core.report import ReportInputs, build_report, gpu_section, timeline
from console.core.report_svg import panel_svg
from console.errors import UserError
from console.model import Classification, ExitRecord, GpuPoint, LaunchSpec, Step
from tests.helpers.sim_files import REPO, make_sim

SID = "20261130-120000-gpu0-beef"
DECISIVE = "torch.OutOfMemoryError: CUDA out of memory. [/INST] [link=https://evil.example]click[/link] [bold]x"
HOSTILE = [
    "\x1b]0;owned-title\x07loading weights \x1b[31mred\x1b[0m",
    "\x1b]8;;https://evil.example\x1b\\a link\x1b]8;;\x1b\\ and \x1b]52;c;aGk=\x07 the clipboard",
    "<script>alert(1)</script> <img src=x onerror=alert(2)>",
    "```",
    "</code></pre><b>bold</b>",
]


def mtp(tmp: Path, *args: str, timeout: float = 60, umask: int | None = None) -> subprocess.CompletedProcess:
    """The real CLI, in a fresh process, with the test's config, cache and audit log."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp / "cache"), XDG_CONFIG_HOME=str(tmp / "xdg"),
               XDG_STATE_HOME=str(tmp / "state"), MTPCONSOLE_AUDIT_LOG=str(tmp / "audit.jsonl"),
               PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "console", "--config", str(tmp / "config.toml"), *args],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)


def one_clear_line(r: subprocess.CompletedProcess, rc: int = 2) -> str:
    """The refusal's one line on stderr (no traceback); returns it."""
    assert r.returncode == rc, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def plant(runs: Path, *, log: list[str], line: str = DECISIVE, ended_at: float | str | None = None,
          created_at: float | str | None = None, sid: str = SID) -> Path:
    """A run directory as a supervisor leaves it after a failure: spec.json, output.log, exit.json. A time given
    as a string is written into the JSON as is (``NaN``, ``1e300``)."""
    d = runs / sid
    d.mkdir(parents=True)
    now = time.time()

    def num(v: float | str | None, default: float) -> str:
        return json.dumps(default) if v is None else (v if isinstance(v, str) else json.dumps(v))

    (d / "spec.json").write_text(
        f'{{"session_id": "{sid}", "argv": ["python3", "-m", "sglang.launch_server", "--port", "30000"], '
        f'"gpus": [0], "port": 30000, "created_at": {num(created_at, now - 100)}}}')
    (d / "output.log").write_text("\n".join([*log, line]) + "\n")
    (d / "exit.json").write_text(f'{{"exit_code": 1, "ended_at": {num(ended_at, now - 10)}}}')
    return d


@pytest.fixture
def host(tmp_path):
    """A config with the ``local`` host on two simulated GPUs and an empty runs directory."""
    sim, _ = make_sim(tmp_path, tag="rep", model=False)
    (tmp_path / "runs").mkdir()
    (tmp_path / "config.toml").write_text(f"""[hosts.local]
transport = "local"
python = "{sys.executable}"
runs_dir = "{tmp_path}/runs"
gpu_source = "sim"
sim_dir = "{sim}"
""")
    return tmp_path


def outside_code(md: str) -> str:
    """The Markdown with its fenced blocks and inline code spans taken out: what a renderer reads as prose."""
    out, fence = [], None
    for line in md.splitlines():
        m = re.match(r"^(`{3,})", line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if line.strip() == fence:
                fence = None
            continue
        if not line.startswith("![the GPU panel at the failure]("):  # the report's own picture
            out.append(re.sub(r"(`+)(?:(?!\1).)+?\1", "", line))
    assert fence is None, "a fenced block was never closed"
    return "\n".join(out)


def report(tmp: Path, *args: str) -> tuple[str, str]:
    out = tmp / "out" / "r.md"
    out.parent.mkdir(exist_ok=True)
    r = mtp(tmp, "report", "--host", "local", SID, "--out", str(out), *args)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    return out.read_text(encoding="utf-8"), out.with_suffix(".svg").read_text(encoding="utf-8")


# ------------------------------------------------------------------ item 3: log text is never markup

def test_a_decisive_line_with_rich_markup_is_written_as_text(host):
    """Was: ``[/INST]`` in the decisive line raised MarkupError (nothing written); ``[link=…]`` was applied."""
    plant(host / "runs", log=["loading"])
    md, svg = report(host)
    assert "[/INST] [link=https://evil.example]click[/link] [bold]x" in md  # the line, as the server wrote it
    assert "[/INST]" in svg and "click[/link]" in svg and "[bold]x" in svg  # drawn as written, not applied
    assert "evil.example" not in re.sub(r"\[link=https://evil\.example\]", "", svg)  # no link made of it


def test_panel_svg_draws_every_host_string_as_text():
    """The same without a host: markup in the session id, the cause, the host name and the hint."""
    inp = ReportInputs(host="h[/x]", session_id="s[/y]", spec=LaunchSpec(session_id="s", argv=["x"], gpus=[0]),
                       classification=Classification(state="failed", cause="gpu_oom", line="[/INST] [red]r",
                                                     hint="[link=a]b[/link]"), state="failed")
    svg = panel_svg(inp)
    for text in ("h[/x]", "s[/y]", "[/INST]", "[red]r", "[link=a]b[/link]"):
        assert text.replace(" ", "&#160;") in svg or text in svg, text


# ------------------------------------------------------------------ item 8: no escapes or HTML in report.md

def test_escapes_and_html_from_the_log_never_reach_the_report(host):
    """Raw ESC/OSC sequences (a title, a hyperlink, a clipboard write) and raw HTML from the log, in the excerpt
    and the decisive line: the files hold no ESC/BEL/control byte, and outside code no HTML tag or link."""
    plant(host / "runs", log=HOSTILE, line="RuntimeError: CUDA out of memory <img src=x onerror=alert(3)> `x` "
                                         "[click](https://evil.example) \x1b]0;t\x07")
    md, svg = report(host)
    for name, text in (("md", md), ("svg", svg)):
        bad = [c for c in text if (ord(c) < 32 and c not in "\n") or 0x7f <= ord(c) < 0xa0]
        assert not bad, (name, bad[:5])
    assert "owned-title" not in md and "aGk=" not in md  # the sequences are gone, not only their ESC
    prose = outside_code(md)
    assert "<" not in prose.replace("&lt;", ""), prose  # no tag outside code
    assert not re.search(r"(?<!\\)\]\(", prose), prose  # no Markdown link outside code
    assert "<script>alert(1)</script>" in md  # the log's text is still there, inside the fenced excerpt
    assert "\n```\n" not in md.split("## Log excerpt", 1)[1].split("````", 1)[0]  # the log's ``` closes nothing
    assert "<script>" not in svg  # the SVG escapes it


def test_html_and_links_in_timeline_prose_are_escaped(host):
    """A step's evidence (from the audit log) holding HTML and a Markdown link is prose: escaped, not rendered."""
    plant(host / "runs", log=["loading"])
    now = time.time()
    entry = {"at": now - 50, "host": "local", "op": "result:launch", "ok": False, "args": {
        "session_id": SID, "steps": [{"name": "listening", "state": "failed", "started_at": now - 60,
                                      "elapsed_s": 5.0, "evidence": "<iframe src=//evil> ![p](https://evil.example/p)"
                                                                    " &#x3C;b&#x3E; \x1b[2J"}]}}
    (host / "audit.jsonl").write_text(json.dumps(entry) + "\n")
    md, _ = report(host)
    row = next(x for x in md.splitlines() if "step **listening**" in x)
    assert "<iframe" not in row and "&lt;iframe src=//evil&gt;" not in row and "&lt;iframe" in row, row
    assert not re.search(r"(?<!\\)\]\(", row) and "!\\[p\\](https" in row, row  # no link, its text kept
    assert "&amp;#x3C;" in row and "\x1b" not in row, row


# ------------------------------------------------------------------ item 8: NaN / huge times

@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "1e300", "-5e18"])
def test_nan_or_huge_times_in_the_run_directory_do_not_crash_the_report(host, bad):
    """Was: ``ValueError: Invalid value NaN`` / ``OverflowError: timestamp out of range`` (nothing written). A
    time that is no number (NaN, ±Infinity) makes the agent call the run directory broken, and the report says
    so; a finite one that is no date (1e300) reads "unknown time"."""
    plant(host / "runs", log=["loading"], ended_at=bad, created_at=bad)
    md, svg = report(host)
    assert "## Timeline" in md and "<svg" in svg
    if "| Run directory | broken: " in md:  # the agent refused the file: the report names why
        assert "Infinity" in bad or bad == "NaN", md
        assert "not a finite number" in md, md
    else:
        assert "unknown time" in md  # the bad time is named as such, never a made-up date


def test_report_functions_take_non_finite_times():
    inp = ReportInputs(host="h", session_id=SID, exit=ExitRecord(exit_code=1, ended_at=float("nan")),
                       steps=[Step(name="a", state="ok", started_at=float("inf"), elapsed_s=float("nan"))],
                       samples=[GpuPoint(at=float("nan"), gpu=0, power_w=1.0, power_limit_w=2.0)])
    md = build_report(inp)
    assert md.count("unknown time") >= 2 and "No GPU samples" in md


# ------------------------------------------------------------------ item 8: the GPU table and the timeline

def test_the_gpu_table_is_a_window_around_the_failure_not_the_whole_ring(host):
    """The ring holds two hours of samples, one a minute; the failure was an hour ago: the table shows only the
    samples from 2 minutes before the failure to 1 minute after it."""
    now = time.time()
    failed = round(now - 3600)
    plant(host / "runs", log=["loading"], ended_at=failed, created_at=failed - 1800)
    ring = [{"at": at, "gpus": [[0, 100.0 + i, 600.0, 1024 * i, 97887, 5.0]]}
            for i, at in enumerate(range(failed - 3600, int(now), 60))]
    (host / "runs" / ".gpu-samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in ring))
    md, _ = report(host, "--since", "3h")
    section = md.split("## GPU around the failure", 1)[1].split("## ", 1)[0]
    rows = [x for x in section.splitlines() if x.startswith("| 2")]
    want = [x for x in ring if failed - 120 <= x["at"] <= failed + 60]
    assert len(rows) == len(want) == 4, section  # -120, -60, 0, +60
    assert [f"{x['gpus'][0][1]:.0f} / 600 W" for x in want] == [r.split(" | ")[2] for r in rows]


def test_a_step_is_placed_at_its_end_time():
    t0 = 1_800_000_000.0
    inp = ReportInputs(host="h", session_id=SID, steps=[
        Step(name="healthy", state="ok", started_at=t0, elapsed_s=42.5),
        Step(name="spawned", state="ok", started_at=t0 + 10, elapsed_s=1.0)])
    rows = [x for x in timeline(inp) if "step" in x]
    assert rows[0].startswith("| 2027-01-15 08:00:11.000Z") and "spawned" in rows[0], rows
    assert rows[1].startswith("| 2027-01-15 08:00:42.500Z") and "healthy" in rows[1], rows


def test_a_running_session_shows_the_last_two_minutes():
    now = 1_800_000_000.0
    pts = [GpuPoint(at=now - s, gpu=0, power_w=float(s), power_limit_w=600.0) for s in (500, 119, 10)]
    section = gpu_section(ReportInputs(host="h", session_id=SID, samples=pts, generated_at=now))
    assert "119 / 600 W" in "\n".join(section) and "500 / 600 W" not in "\n".join(section)


# ------------------------------------------------------------------ item 8: --since nan|inf

@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "infh", "nanm", "1e400", "1e306d"])
def test_since_must_be_a_finite_age(host, text):
    with pytest.raises(UserError):
        parse_age(text)
    r = mtp(host, "report", "--host", "local", SID, "--since", text, "--out", str(host / "x.md"))
    assert "--since" in one_clear_line(r)
    assert not (host / "x.md").exists()


# ------------------------------------------------------------------ item 4: report --out targets

def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def test_new_report_files_are_0600_whatever_the_umask(host):
    plant(host / "runs", log=["loading"])
    out = host / "new.md"
    r = mtp(host, "report", "--host", "local", SID, "--out", str(out), umask=0)
    assert r.returncode == 0, r.stderr
    assert f"wrote {out} and {out.with_suffix('.svg')}" in r.stdout  # the SVG named
    assert _mode(out) == 0o600 and _mode(out.with_suffix(".svg")) == 0o600
    assert sorted(p.name for p in host.iterdir() if p.name.startswith((".new", "new"))) == ["new.md", "new.svg"]


@pytest.mark.parametrize("which", ["md", "svg"])
def test_a_planted_symlink_is_never_followed(host, which):
    """Another user plants ``r.md`` (or the SVG's ``r.svg``) as a symlink to a file root owns: refused, the
    victim untouched, nothing written — with ``--overwrite`` too."""
    plant(host / "runs", log=["loading"])
    victim = host / "victim"
    victim.write_text("precious\n")
    out = host / "r.md"
    link = out if which == "md" else out.with_suffix(".svg")
    link.symlink_to(victim)
    for extra in ([], ["--overwrite"]):
        r = mtp(host, "report", "--host", "local", SID, "--out", str(out), *extra)
        line = one_clear_line(r)
        assert f"{link} is a symbolic link" in line, line
        assert victim.read_text() == "precious\n" and link.is_symlink()
        other = out.with_suffix(".svg") if which == "md" else out
        assert not other.exists()


def test_bad_targets_each_get_one_clear_line(host, tmp_path):
    plant(host / "runs", log=["loading"])
    fifo = host / "fifo.md"
    os.mkfifo(fifo)
    (host / "adir.md").mkdir()
    cases = {
        str(host / "adir.md"): "is a directory",
        str(host / "missing" / "r.md"): f"the directory {host / 'missing'} does not exist",
        "/dev/full": "/dev/full is a character device",
        str(fifo): "is a FIFO",
        str(host / "x.svg"): "the Markdown cannot be x.svg",
        str(host / "file.md" / "r.md"): "is not a directory",
    }
    (host / "file.md").write_text("")
    for target, why in cases.items():
        r = mtp(host, "report", "--host", "local", SID, "--out", target, timeout=30)
        assert why in one_clear_line(r), (target, r.stderr)
    assert not Path("/dev/full.svg").exists() and not (host / "x.svg").exists() and not (host / "fifo.svg").exists()


def test_an_existing_report_needs_overwrite_which_replaces_it_not_writes_through_it(host):
    """Without ``--overwrite``: refused, unchanged. With it: the name is replaced (0600); a hard link to the
    old file — how a planted file would be shared — keeps the old content."""
    plant(host / "runs", log=["loading"])
    out = host / "r.md"
    out.write_text("old md\n")
    os.chmod(out, 0o644)
    keep = host / "keep"
    os.link(out, keep)
    r = mtp(host, "report", "--host", "local", SID, "--out", str(out))
    assert f"{out} already exists: --overwrite replaces it" in one_clear_line(r)
    assert out.read_text() == "old md\n" and not out.with_suffix(".svg").exists()
    out.with_suffix(".svg").write_text("old svg\n")
    r = mtp(host, "report", "--host", "local", SID, "--out", str(out))  # the SVG is checked like the .md
    assert "already exists" in one_clear_line(r)
    r = mtp(host, "report", "--host", "local", SID, "--out", str(out), "--overwrite")
    assert r.returncode == 0, r.stderr
    assert out.read_text().startswith("# Incident report") and "<svg" in out.with_suffix(".svg").read_text()
    assert keep.read_text() == "old md\n" and _mode(out) == 0o600 and _mode(out.with_suffix(".svg")) == 0o600


async def test_the_tuis_report_replaces_its_own_file_but_never_follows_a_symlink(host, monkeypatch):
    """The TUI's ``p`` (LiveBackend.report, through the same writer): a second report replaces the first; a
    symlink planted at its name is refused (the UI shows the error) and its target untouched."""
    from console.audit import Audit
    from console.config import load_config
    from console.link.link import HostLink
    from console.link.ssh import HostSpec
    from console.ops.backend import LiveBackend

    plant(host / "runs", log=["loading"])
    monkeypatch.setenv("XDG_STATE_HOME", str(host / "state"))
    cfg = load_config(host / "config.toml")
    link = HostLink(HostSpec(name="local", local=True), cfg.hosts["local"])
    be = LiveBackend(cfg, [link], audit=Audit(host / "audit.jsonl"))
    md = host / "state" / "mtpconsole" / "reports" / f"report-{SID}.md"
    victim = host / "victim"
    victim.write_text("precious\n")
    try:
        await link.open()
        assert await be.report("local", SID) == str(md)
        first = os.stat(md).st_ino
        assert await be.report("local", SID) == str(md)  # replaced: a new file under the same name
        assert os.stat(md).st_ino != first and _mode(md) == 0o600
        md.unlink()
        md.symlink_to(victim)
        with pytest.raises(UserError, match="is a symbolic link"):
            await be.report("local", SID)
    finally:
        await link.close()
    assert victim.read_text() == "precious\n"


def _full_dir(base: Path) -> tuple[list[str], str]:
    """(a command prefix to run in, how) for a directory ``base/full`` on a tmpfs that is nearly full: mounted
    here when ``mount`` works, else inside ``unshare -rm`` (the prefix mounts it first)."""
    d = base / "full"
    d.mkdir()
    fill = f"head -c 1048576 /dev/zero > {d}/filler 2>/dev/null; true"
    if os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(d)],
                                            capture_output=True).returncode == 0:
        subprocess.run(["sh", "-c", fill], check=True)
        return [], "mount"
    if shutil.which("unshare") and subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=48k tmpfs {d} && {fill} && exec \"$@\"",
                "sh"], "unshare"
    pytest.skip("no tmpfs: neither mount nor unshare -rm works here")


def test_a_full_disk_is_one_clear_line_and_leaves_nothing(host, record_property):
    plant(host / "runs", log=["loading"])
    prefix, how = _full_dir(host)
    print(f"full disk made by: {how}")  # shown with -rP / -s, and kept in the JUnit report
    record_property("full_disk", how)
    out = host / "full" / "r.md"
    try:
        env = dict(os.environ, XDG_CACHE_HOME=str(host / "cache"), XDG_CONFIG_HOME=str(host / "xdg"),
                   MTPCONSOLE_AUDIT_LOG=str(host / "audit.jsonl"), PYTHONPATH=str(REPO))
        script = ("import os, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True);"
                  f"print(r.returncode); print(r.stderr, end=''); print(sorted(os.listdir({str(out.parent)!r})))")
        r = subprocess.run([*prefix, sys.executable, "-c", script, sys.executable, "-m", "console", "--config",
                            str(host / "config.toml"), "report", "--host", "local", SID, "--out", str(out)],
                           env=env, capture_output=True, text=True, timeout=60)
        rc, *err, left = r.stdout.splitlines()
        assert rc == "2" and len(err) == 1 and "Traceback" not in r.stdout, r.stdout + r.stderr
        assert f"cannot write {out.with_suffix('.svg')}: No space left on device" in err[0] or \
            f"cannot write {out}: No space left on device" in err[0], err
        assert left == "['filler']", left  # no half-written report, no temporary file
    finally:
        if how == "mount":
            subprocess.run(["umount", "-l", str(host / "full")], capture_output=True)


# ------------------------------------------------------------------ item 7: plan --model-config

def plan(path: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", "plan", "--model-config", path, "--gpu-mem", "96GB"],
                          cwd=REPO, capture_output=True, text=True, timeout=30, env=dict(os.environ, PYTHONPATH=str(REPO)))


def _fifo(tmp: Path, name: str) -> Path:
    p = tmp / name
    os.mkfifo(p)
    return p


def test_plan_refuses_a_device_a_fifo_and_a_huge_file_without_reading_them(host):
    """Was: ``/dev/zero`` read whole before the size check (24 GB RSS, OOM-killed); a FIFO hung for ever."""
    huge = host / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(64 << 20)  # sparse: cheap to make, as costly to read whole as a real one
    cases = {"/dev/zero": "is a character device, not a regular file", str(_fifo(host, "f.json")): "is a FIFO",
             str(huge): "is larger than 4194304 bytes"}
    for path, why in cases.items():
        t = time.monotonic()
        r = plan(path)
        assert why in one_clear_line(r), (path, r.stderr)
        assert time.monotonic() - t < 25


def test_plan_refuses_deep_json_with_a_clear_line(host):
    """Was: a RecursionError traceback for 100,000-deep JSON."""
    deep = host / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert "nests deeper than 32 levels" in one_clear_line(plan(str(deep)))
    obj = host / "obj"
    obj.mkdir()
    (obj / "config.json").write_text('{"a":' * 40 + "1" + "}" * 40)
    assert "nests deeper" in one_clear_line(plan(str(obj)))


def test_classify_log_refuses_devices_and_fifos_and_bounds_exit_json(tmp_path):
    """The other files the CLI reads from the operator: ``classify-log FILE`` (was: a FIFO hung, ``/dev/zero``
    never ended) and ``--exit-json`` (was: read whole; deep JSON a RecursionError traceback)."""
    fifo = _fifo(tmp_path, "log")
    log = tmp_path / "output.log"
    log.write_text("RuntimeError: CUDA out of memory\n")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "console", "classify-log", *args], cwd=REPO, timeout=30,
                              capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))

    r = run(str(fifo), "/dev/zero", str(log), "--json")
    assert r.returncode == 1, r.stderr
    errors = [e.get("error") for e in json.loads(r.stdout)]
    assert errors == ["is a FIFO, not a regular file", "is a character device, not a regular file", None], errors
    deep = tmp_path / "exit.json"
    deep.write_text("[" * 30_000 + "]" * 30_000)
    cases = {"/dev/zero": "is a character device", str(_fifo(tmp_path, "e.json")): "is a FIFO",
             str(deep): "nested too deeply"}
    for path, why in cases.items():
        assert why in one_clear_line(run(str(log), "--exit-json", path)), path


# ------------------------------------------------------------------ item 8: the config file

def test_a_fifo_or_a_device_as_config_is_refused_not_waited_on(host):
    """Was: ``--config FIFO`` hung until a writer came."""
    for path, why in ((_fifo(host, "c.toml"), "is a FIFO"), (Path("/dev/zero"), "is a character device"),
                      (host, "is a directory")):
        t = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "console", "--config", str(path), "status", "--host", "local"],
                           cwd=REPO, capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert why in one_clear_line(r), r.stderr
        assert time.monotonic() - t < 25


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf", "-inf", "1e9"])
def test_connect_timeout_must_be_a_positive_finite_number(tmp_path, value):
    conf = tmp_path / "c.toml"
    conf.write_text(f'[hosts.h]\nconnect_timeout = {value}\n')
    r = subprocess.run([sys.executable, "-m", "console", "--config", str(conf), "status", "--host", "h"],
                       cwd=REPO, capture_output=True, text=True, timeout=30, env=dict(os.environ, PYTHONPATH=str(REPO)))
    line = one_clear_line(r)
    assert str(conf) in line and "hosts.h.connect_timeout" in line, line


def test_deeply_nested_toml_is_a_clear_line(tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    r = subprocess.run([sys.executable, "-m", "console", "--config", str(conf), "status", "--host", "h"],
                       cwd=REPO, capture_output=True, text=True, timeout=30, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert "nested too deeply" in one_clear_line(r)


# ------------------------------------------------------------------ item 8: check on a terminal

def test_check_shows_an_unknown_flags_escape_bytes_as_escapes_on_a_terminal():
    """Was: ``check -- $'--x\\e]0;owned\\a'`` printed the bytes raw: the terminal's title changed."""
    flag = "--evil\x1b]0;owned\x07\x1b[31m\u202e"
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen([sys.executable, "-m", "console", "check", "--demo", "--", "--model-path", "/m", flag],
                             cwd=REPO, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                             env=dict(os.environ, PYTHONPATH=str(REPO), TERM="xterm"))
        os.close(slave)
        slave = -1
        out = b""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif p.poll() is not None:
                break
        assert p.wait(timeout=30) in (1, 2)  # problems listed (2 once invalid flags are bad input)
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    text = out.decode("utf-8", "replace")
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, repr(text)
    assert "--evil\\x1b]0;owned\\x07\\x1b[31m\\u202e" in text, text


def test_a_saved_help_file_that_is_a_fifo_or_a_device_is_refused_not_waited_on(tmp_path):
    """``check``/``flags --help-file`` read the operator's file the way ``plan`` does (was: a FIFO blocked)."""
    for path, why in {str(_fifo(tmp_path, "help.txt")): "is a FIFO", "/dev/zero": "is a character device"}.items():
        for cmd in (["check", "--help-file", path, "--", "--port", "1"], ["flags", "--help-file", path]):
            t = time.monotonic()
            r = subprocess.run([sys.executable, "-m", "console", *cmd], cwd=REPO, capture_output=True, text=True,
                               timeout=30, env=dict(os.environ, PYTHONPATH=str(REPO)))
            assert why in one_clear_line(r), (cmd, r.stderr)
            assert time.monotonic() - t < 25
