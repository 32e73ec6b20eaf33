"""Progress of long commands (issue 18 item 3): one helper (windtunnel.cli.progress), rich bars on a TTY and
plain throttled lines on a non-TTY stderr; stdout keeps the result (JSON parses)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

from conftest import REPO
from windtunnel.cli.progress import progress_reporter


def _env(**extra: str) -> dict:
    return {**os.environ, "COLUMNS": "80", **extra}


def test_plain_stream_gets_first_last_and_throttled_lines():
    stream = io.StringIO()
    with progress_reporter(stream=stream, tty=False, interval_s=3600) as progress:
        for done in range(101):
            progress("screen", done, 100)
        for done in range(11):
            progress("refine", done, 10)
        progress("refine", 10, 10)  # a repeated final update is told once
    lines = stream.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == ["screen: 0/100 (0%)", "screen: 100/100 (100%)",
                                                      "refine: 0/10 (0%)", "refine: 10/10 (100%)"]


def test_interval_zero_reports_every_update_and_silence_switch():
    stream = io.StringIO()
    with progress_reporter(stream=stream, tty=False, interval_s=0) as progress:
        for item in progress.track(range(5), "rows"):
            assert item >= 0
    assert len(stream.getvalue().splitlines()) == 6  # 0/5 .. 5/5
    os.environ["WINDTUNNEL_PROGRESS"] = "0"
    try:
        quiet = io.StringIO()
        with progress_reporter(stream=quiet, tty=False) as progress:
            progress("screen", 1, 2)
        assert quiet.getvalue() == ""
    finally:
        del os.environ["WINDTUNNEL_PROGRESS"]


def test_tty_draws_a_rich_bar_and_writes_no_plain_lines():
    stream = io.StringIO()
    with progress_reporter(stream=stream, tty=True, interval_s=0) as progress:
        progress("screen", 5, 10)
    assert "screen: 5/10" not in stream.getvalue()


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "windtunnel.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=str(REPO), env=_env(WINDTUNNEL_PROGRESS_INTERVAL="0"))


def test_train_search_json_stdout_is_clean_and_stderr_has_updates(tmp_path):
    proc = _run("train", "search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "16",
                "--global-batch", "32", "--pin", "pp=1,2", "--pin", "vpp=1", "--pin", "cp=1", "--refine", "4",
                "--top", "3", "--workers", "1", "--json", "--state", str(tmp_path / "s.json"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["plans"]
    assert "screen: " in proc.stderr and "refine: " in proc.stderr


def test_validate_inference_json_stdout_is_clean_and_stderr_has_row_updates():
    proc = _run("validate", "inference", "validation/inference_runs.csv", "--json")
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    total = len(document["rows"])
    assert f"predict rows: {total}/{total} (100%)" in proc.stderr


def test_busy_is_silent_for_quick_work_and_ticks_for_long_work():
    import time

    quick = io.StringIO()
    with progress_reporter(stream=quick, tty=False, interval_s=5) as progress, progress.busy("quick"):
        pass
    assert quick.getvalue() == ""
    slow = io.StringIO()
    with progress_reporter(stream=slow, tty=False, interval_s=0.05) as progress, progress.busy("slow"):
        time.sleep(0.3)
    lines = slow.getvalue().splitlines()
    assert lines[0].startswith("slow: running, ") and lines[-1].startswith("slow: done in ")


def test_avail_simulate_json_stays_clean_with_progress_lines():
    env = _env(WINDTUNNEL_PROGRESS_INTERVAL="0.01")
    proc = subprocess.run([sys.executable, "-m", "windtunnel.cli", "avail", "simulate", "--devices", "16384",
                           "--replications", "3000", "--json"], capture_output=True, text=True, timeout=300,
                          cwd=str(REPO), env=env)
    assert proc.returncode == 0, proc.stderr
    assert 0 < json.loads(proc.stdout)["ettr"] < 1
    assert "avail simulate: 3,000 replications: done in" in proc.stderr
