"""Quiet interruption (issue 20 item 6): Ctrl-C (SIGINT to the process group, as a terminal sends it) or SIGTERM
(to the parent alone, as `kill PID` does) of a `train search` running worker processes stops the workers at once,
prints the resume hint and no traceback (orphaned workers printed ~4 KB of BrokenPipeError tracebacks, and a
Ctrl-C could hang in the pool's join)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import REPO

SEARCH = ["train", "search", "--model", "llama3-405b", "--hardware", "h100-sxm", "--devices", "16384",
          "--global-batch", "2048", "--workers", "2", "--refine", "3000"]


def _session_processes(sid: int) -> list[str]:
    return subprocess.run(["pgrep", "-s", str(sid)], capture_output=True, text=True).stdout.split()


@pytest.mark.parametrize("how", ["sigint-group", "sigterm-parent"])
def test_interrupted_search_stops_its_workers_quietly(tmp_path, how):
    # The search starts as from a terminal, with SIGINT at its default: a test run launched as a background job of
    # a non-interactive shell inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler.
    proc = subprocess.Popen([sys.executable, "-m", "windtunnel.cli", *SEARCH], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO / "src")},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    refining = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("refine:"):
                refining.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert refining.wait(120), "".join(lines)  # the workers are refining plans
        time.sleep(0.5)
        start = time.perf_counter()
        if how == "sigint-group":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        took = time.perf_counter() - start
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(10)
    stderr = "".join(lines)
    assert code == 130, stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert "rerun with --resume" in stderr, stderr
    assert took < 10, took
    time.sleep(0.5)
    assert _session_processes(proc.pid) == [], "workers outlived the search"
    assert list(tmp_path.glob(".windtunnel-search-*.json")), "no state file to resume from"
