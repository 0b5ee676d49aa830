"""The exporter serves the console's view over real HTTP on 127.0.0.1, scraped by a real Prometheus parser."""

from __future__ import annotations

import urllib.request

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from console.core.exporter import ViewCollector
from console.model import Advice, ConnectionInfo, GpuCurrent, GpuSample, HostSnapshot, HostView, SessionView
from tests.helpers.sshd import free_port


def view() -> HostView:
    snap = HostSnapshot(name="b200", connection=ConnectionInfo(state="connected"), received_at=100.0,
                        gpus=[GpuSample(index=0, power_w=412.0, power_limit_w=600.0, mem_used_mib=1024,
                                        mem_total_mib=2048, util_pct=87.0),
                              GpuSample(index=1, power_w=80.0, power_limit_w=600.0)])
    failed = SessionView(host="b200", session_id="s1", state="failed", cause="gpu_oom", gpus=[1])
    return HostView(snapshot=snap, sessions=[failed],
                    current=[GpuCurrent(index=0), GpuCurrent(index=1, session=failed, why="ended")])


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_exporter_scraped_over_http():
    reg = CollectorRegistry()
    advice = [Advice(host="b200", gpu=0, kind="gpu_underused", message="m")]
    reg.register(ViewCollector(lambda: {"b200": view()}, advice=lambda v: advice, clock=lambda: 103.5))
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=reg)
    try:
        m = scrape(port)
    finally:
        server.shutdown()
        thread.join(5)
    assert m[("mtpconsole_host_connected", (("host", "b200"),))] == 1.0
    assert m[("mtpconsole_host_sample_age_seconds", (("host", "b200"),))] == 3.5
    assert m[("mtpconsole_gpu_power_watts", (("gpu", "0"), ("host", "b200")))] == 412.0
    assert m[("mtpconsole_gpu_memory_used_bytes", (("gpu", "0"), ("host", "b200")))] == 1024 * 1048576
    assert m[("mtpconsole_gpu_session_state", (("gpu", "1"), ("host", "b200"), ("state", "failed")))] == 1.0
    assert m[("mtpconsole_gpu_session_state", (("gpu", "0"), ("host", "b200"), ("state", "idle")))] == 1.0
    assert m[("mtpconsole_gpu_failure", (("cause", "gpu_oom"), ("gpu", "1"), ("host", "b200")))] == 1.0
    assert m[("mtpconsole_gpu_advice", (("gpu", "0"), ("host", "b200")))] == 1.0


def test_stale_link_reads_disconnected_and_no_gpu_idle():
    """A stale link (its agent answered no ping): host_connected 0, its link state ``stale``, and its GPUs'
    sessions ``stale`` — the ready one and the idle one alike (no claim without its age)."""
    v = view()
    snap = v.snapshot.model_copy(update={"connection": ConnectionInfo(state="stale", error="no ping answer")})
    ready = SessionView(host="b200", session_id="s2", state="stale", gpus=[0])
    stale = HostView(snapshot=snap, sessions=[ready], current=[GpuCurrent(index=0, session=ready), GpuCurrent(index=1)])
    reg = CollectorRegistry()
    reg.register(ViewCollector(lambda: {"b200": stale}, clock=lambda: 112.0))
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=reg)
    try:
        m = scrape(port)
    finally:
        server.shutdown()
        thread.join(5)
    host = (("host", "b200"),)
    assert m[("mtpconsole_host_connected", host)] == 0.0
    assert m[("mtpconsole_host_link_state", (("host", "b200"), ("state", "stale")))] == 1.0
    assert m[("mtpconsole_host_link_state", (("host", "b200"), ("state", "connected")))] == 0.0
    assert m[("mtpconsole_host_sample_age_seconds", host)] == 12.0
    for gpu in ("0", "1"):
        assert m[("mtpconsole_gpu_session_state", (("gpu", gpu), ("host", "b200"), ("state", "stale")))] == 1.0
        assert m[("mtpconsole_gpu_session_state", (("gpu", gpu), ("host", "b200"), ("state", "ready")))] == 0.0
        assert m[("mtpconsole_gpu_session_state", (("gpu", gpu), ("host", "b200"), ("state", "idle")))] == 0.0
