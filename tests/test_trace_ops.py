"""Per-operator traces (issue 18 item 8): `train simulate --trace FILE --trace-detail op` draws the operators of
one pipeline rank on compute, TP, CP, EP, DP, PP and host tracks, and stays small for a 16k-device job."""

from __future__ import annotations

import collections
import json
import subprocess
import sys

from conftest import REPO

LANES = ("ops: compute", "ops: TP", "ops: CP", "ops: EP", "ops: DP", "ops: PP", "ops: host")


def _trace(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    path = tmp_path / "trace.json"
    proc = subprocess.run([sys.executable, "-m", "windtunnel.cli", "train", "simulate", *args, "--trace", str(path)],
                          capture_output=True, text=True, timeout=300, cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(path.read_text()) | {"_bytes": path.stat().st_size}


def _lanes(trace: dict, rank: int) -> collections.Counter:
    events = trace["traceEvents"]
    pid = next(e["pid"] for e in events if e["name"] == "process_name" and e["args"]["name"] == f"pipeline rank {rank}")
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name" and e["pid"] == pid}
    return collections.Counter(names[e["tid"]] for e in events if e["ph"] == "X" and e["pid"] == pid)


def test_moe_job_has_every_operator_track_on_the_chosen_rank(tmp_path):
    _, trace = _trace(tmp_path, "--model", "mixtral-8x7b", "--hardware", "h100-sxm", "--devices", "32", "--seq-len",
                      "8192", "--global-batch", "16", "--plan", "tp=2,pp=2,cp=2,ep=4,mbs=1,zero=1",
                      "--trace-detail", "op", "--trace-rank", "1")
    lanes = _lanes(trace, 1)
    for lane in LANES:
        assert lanes[lane] > 0, (lane, lanes)
    assert not any(lane.startswith("ops:") for lane in _lanes(trace, 0))  # only the chosen rank is expanded
    summary = trace["otherData"]["operators"]
    assert summary["rank"] == 1 and summary["blocks_expanded"] > 0 and summary["operators"] > 100
    ops = [e for e in trace["traceEvents"] if e["ph"] == "X" and e.get("cat") == "ep_comm"]
    assert all(e["dur"] > 0 for e in ops)


def test_block_trace_is_unchanged_without_op_detail(tmp_path):
    _, trace = _trace(tmp_path, "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "16", "--global-batch",
                      "16", "--plan", "tp=2,pp=2,mbs=1")
    assert "operators" not in trace["otherData"]
    assert not any(lane.startswith("ops:") for lane in _lanes(trace, 0))


def test_16k_device_trace_stays_under_a_few_megabytes(tmp_path):
    _, trace = _trace(tmp_path, "--model", "llama3-405b", "--hardware", "h100-sxm", "--devices", "16384",
                      "--global-batch", "2048", "--plan", "tp=8,pp=16,vpp=2,mbs=1", "--trace-detail", "op")
    assert trace["_bytes"] < 3 * 2**20
    lanes = _lanes(trace, 0)
    assert lanes["ops: compute"] > 0 and lanes["ops: TP"] > 0 and lanes["ops: PP"] > 0


def test_trace_rank_out_of_range_is_one_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "windtunnel.cli", "train", "simulate", "--model", "llama3-8b",
                           "--hardware", "h100-sxm", "--devices", "16", "--global-batch", "16", "--plan",
                           "tp=2,pp=2,mbs=1", "--trace", str(tmp_path / "t.json"), "--trace-detail", "op",
                           "--trace-rank", "5"], capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert proc.returncode == 2 and "trace-rank" in proc.stderr and "Traceback" not in proc.stderr


def test_operators_lie_inside_their_pipeline_blocks():
    from windtunnel.api import simulate_training

    result = simulate_training("llama3-8b", "h100-sxm", 16, seq_len=2048, global_batch=16, plan="tp=2,pp=2,mbs=1",
                               keep_trace=True, trace_detail="op", trace_rank=0)
    events, summary = result.trace_ops
    timeline = result.trace
    spans = {name: (timeline.start[i], timeline.end[i]) for i, name in enumerate(timeline.names)
             if timeline.streams[i] == "r0"}
    inside = [e for e in events if e.stream not in ("pp", "dp")]
    assert inside and summary["blocks_expanded"] > 0
    for e in inside:
        start, end = spans[e.block]
        assert start - 1e-12 <= e.start <= e.end <= end + 1e-9, e
    assert {e.stream for e in inside} >= {"compute", "tp", "host"}
