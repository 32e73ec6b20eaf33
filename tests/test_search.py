"""Sim2Train plan search: pruning, screening vs the engine, determinism, backends, resume, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import search_once
from windtunnel.search.backends import LocalBackend
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.model import load_model
from windtunnel.specs.plan import parse_plan
from windtunnel.train.search import TrainingProblem, search_training
from windtunnel.train.space import SearchSpace, prune, refine

SMALL = {"pp": [1, 2, 4], "vpp": [1, 2], "mbs": [1, 2], "recompute": ["none", "selective", "full"], "zero": [1, 3],
         "cp": [1], "order": ["tp-cp-dp-pp", "tp-cp-pp-dp"]}


def small_space(**overrides) -> SearchSpace:
    choices = {**SMALL, **overrides}
    return SearchSpace(load_model("llama3-8b"), load_hardware("h100-sxm", 16), 4096, 32, choices=choices)


def strip_timing(document: dict) -> dict:
    return {k: v for k, v in document.items() if k != "elapsed_s"}


@pytest.fixture(scope="module")
def small_document():
    backend = LocalBackend(1)
    try:
        return search_training(small_space(), backend, top=50, refine_count=12)
    finally:
        backend.close()


def test_prune_reasons_are_the_broken_rules():
    """Each pruned candidate is counted under the first rule it breaks; kept ones break none."""
    space = SearchSpace(load_model("llama3-8b"), load_hardware("h100-sxm", 24), 4096, 48,
                        choices={**SMALL, "tp": [1, 3, 8], "pp": [1, 2, 5]})
    chunk = space.chunk(0, space.total)
    keep, reasons = prune(space, chunk)
    assert sum(reasons.values()) + int(keep.sum()) == space.total
    assert reasons["tp does not divide attention heads"] > 0  # tp=3 with 32 heads
    assert reasons["devices not divisible by tp*pp*cp"] > 0   # pp=5 on 24 devices
    assert keep.sum() > 0
    kept = {k: v[keep] for k, v in chunk.items()}
    assert set(np.unique(kept["tp"])) <= {1, 8} and set(np.unique(kept["pp"])) <= {1, 2}


def test_out_of_memory_plans_are_never_ranked(small_document):
    """Every ranked plan fits in memory per the engine, and the screen prunes some plans for memory."""
    assert small_document["plans"], "the search found no plan"
    capacity = load_hardware("h100-sxm", 16).chip.hbm_bytes
    for row in small_document["plans"]:
        assert row["peak_memory_bytes"] <= capacity
        assert row["memory_headroom_bytes"] >= 0
        assert refine(small_space(), parse_plan(row["plan"])).feasible


def test_memory_pruning_counts_a_known_oom_plan():
    """A plan that cannot fit (405B on 16 GPUs without sharding) is counted as out of memory, never screened."""
    space = SearchSpace(load_model("llama3-405b"), load_hardware("h100-sxm", 16), 4096, 16,
                        choices={"tp": [8], "pp": [2], "vpp": [1], "mbs": [1], "recompute": ["full"], "zero": [0],
                                 "cp": [1], "sp": [True], "tp_overlap": [True], "order": ["tp-cp-dp-pp"],
                                 "schedule": ["1f1b"]})
    backend = LocalBackend(1)
    document = search_training(space, backend, top=5, refine_count=2)
    assert document["candidates"]["pruned"].get("out of memory") == 1
    assert document["candidates"]["screened"] == 0 and document["plans"] == []


def test_screen_agrees_with_engine_within_tolerance(small_document):
    """On refined plans the vectorised screen is within 15% (median) and 50% (max) of the engine."""
    agreement = small_document["screen_vs_engine"]
    assert agreement["n"] >= 5
    assert agreement["median_abs_error"] <= 0.15
    assert agreement["max_abs_error"] <= 0.5


def test_ranking_is_sorted_and_contract_keys_present(small_document):
    """Plans are ranked by the engine's step time and carry the JSON contract keys."""
    times = [row["step_time_s"] for row in small_document["plans"]]
    assert times == sorted(times)
    for key in ("candidates", "elapsed_s", "plans"):
        assert key in small_document
    for key in ("enumerated", "pruned", "screened", "refined"):
        assert key in small_document["candidates"]
    for row in small_document["plans"]:
        for key in ("plan", "step_time_s", "tokens_per_s", "mfu", "peak_memory_bytes"):
            assert key in row
        parse_plan(row["plan"])  # the plan string is accepted by --plan
    assert small_document["elapsed_s"]["total"] > 0


def test_search_is_deterministic(small_document):
    """Same inputs, same ranking and numbers (timings aside)."""
    backend = LocalBackend(1)
    again = search_training(small_space(), backend, top=50, refine_count=12)
    assert strip_timing(again) == strip_timing(small_document)


def test_local_processes_match_inline(small_document):
    """Two worker processes give the same answer as one."""
    backend = LocalBackend(2)
    try:
        parallel = search_training(small_space(), backend, top=50, refine_count=12)
    finally:
        backend.close()
    assert strip_timing(parallel) == strip_timing(small_document)


def test_resume_after_interruption_gives_the_same_ranking(tmp_path, small_document):
    """Interrupt the refine phase, resume from the state file: same ranking, refined work not redone."""
    state = tmp_path / "state.json"
    backend = LocalBackend(1)
    with pytest.raises(KeyboardInterrupt):
        search_training(small_space(), backend, top=50, refine_count=12, state_path=state, stop_after_refined=3)
    saved = json.loads(state.read_text())
    assert saved["screen_done"] and len(saved["refined"]) == 3
    resumed = search_training(small_space(), backend, top=50, refine_count=12, state_path=state, resume=True)
    assert [r["plan"] for r in resumed["plans"]] == [r["plan"] for r in small_document["plans"]]
    assert resumed["candidates"] == small_document["candidates"]


def test_resume_ignores_a_state_file_of_another_search(tmp_path):
    """A state file whose fingerprint differs is not reused."""
    state = tmp_path / "state.json"
    backend = LocalBackend(1)
    search_training(small_space(mbs=[1]), backend, top=5, refine_count=3, state_path=state)
    other = search_training(small_space(mbs=[2]), backend, top=5, refine_count=3, state_path=state, resume=True)
    assert all("mbs=2" in row["plan"] for row in other["plans"])


def test_baseline_gain_and_percentile():
    """A baseline reports its engine numbers, the best plan's gain and its screen percentile."""
    backend = LocalBackend(1)
    document = search_training(small_space(), backend, top=10, refine_count=6,
                               baseline="tp=1,pp=1,mbs=1,recompute=full,zero=1")
    baseline = document["baseline"]
    assert baseline["feasible"]
    best = document["plans"][0]["tokens_per_s"]
    assert baseline["gain"] == pytest.approx(best / baseline["tokens_per_s"] - 1)
    assert 0.0 <= baseline["screen_percentile"] <= 1.0


def test_pareto_front_is_non_dominated(small_document):
    """No Pareto plan is beaten on both tokens/s and memory headroom by a ranked plan."""
    for point in small_document["pareto"]:
        for row in small_document["plans"]:
            assert not (row["tokens_per_s"] > point["tokens_per_s"]
                        and row["memory_headroom_bytes"] > point["memory_headroom_bytes"])


def test_unknown_dimension_is_a_clear_error():
    with pytest.raises(WindtunnelError, match="foo"):
        small_space(foo=[1])
    with pytest.raises(WindtunnelError, match="recompute"):
        small_space(recompute=["sometimes"])


def test_problem_streams_in_chunks():
    """The problem enumerates any slice of the space without materialising the rest."""
    space = SearchSpace(load_model("deepseek-v3"), load_hardware("h800", 8192), 4096, 15360)
    problem = TrainingProblem(space)
    assert problem.total > 1_000_000
    middle = problem.chunk(problem.total // 2, problem.total // 2 + 1000)
    assert len(middle["tp"]) == 1000


def test_ray_backend_matches_local(small_document):
    """The Ray backend (a local Ray instance started here) ranks the same plans with the same numbers."""
    pytest.importorskip("ray")
    from windtunnel.search.backends import RayBackend

    backend = RayBackend(num_cpus=2)
    try:
        on_ray = search_training(small_space(), backend, top=50, refine_count=12)
    finally:
        backend.close()
    assert strip_timing(on_ray) == strip_timing(small_document)


def test_cli_search_json_and_outputs(tmp_path):
    """`train search --json --out x.csv --report x.html` prints the contract and writes both files."""
    out, report = tmp_path / "plans.csv", tmp_path / "search.html"
    command = [sys.executable, "-m", "windtunnel.cli", "train", "search", "--model", "llama3-8b", "--hardware",
               "h100-sxm", "--devices", "16", "--seq-len", "4096", "--global-batch", "32", "--pin", "pp=1,2",
               "--pin", "vpp=1", "--pin", "zero=1", "--pin", "cp=1", "--pin", "mbs=1", "--refine", "4", "--top", "3",
               "--workers", "1", "--json", "--out", str(out), "--report", str(report),
               "--baseline", "tp=8,pp=1,mbs=1,recompute=none", "--state", str(tmp_path / "s.json")]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert document["candidates"]["refined"] >= 1 and len(document["plans"]) <= 3
    assert "gain" in document["baseline"]
    assert out.read_text().startswith("rank,plan,")
    assert "<html" in report.read_text() and "plotly" in report.read_text().lower()


def test_cli_bad_pin_is_one_clear_error(tmp_path):
    command = [sys.executable, "-m", "windtunnel.cli", "train", "search", "--model", "llama3-8b", "--hardware",
               "h100-sxm", "--devices", "16", "--global-batch", "32", "--pin", "tp=four"]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert "error:" in proc.stderr and "tp" in proc.stderr and "Traceback" not in proc.stderr


def test_search_issues_every_plan_and_the_baseline_with_its_cuda_graphs_mode():
    """A search run with CUDA graphs ranks plans issued that way; an unstated baseline follows it."""
    space = SearchSpace(load_model("qwen3-30b-a3b"), load_hardware("b200", 8), 4096, 64, precision="fp8",
                        moe_imbalance=1.0, cuda_graphs="full",
                        choices={"tp": [1], "pp": [1], "ep": [8], "mbs": [1], "recompute": ["none"], "zero": [1],
                                 "cp": [1], "vpp": [1], "sp": [False], "tp_overlap": [False], "schedule": ["1f1b"],
                                 "order": ["tp-cp-dp-pp"]})
    document = search_once(space, top=5, refine_count=2, baseline="tp=1,pp=1,ep=8,mbs=1,recompute=none")
    assert document["cuda_graphs"] == "full"
    assert "cuda_graphs=full" in document["plans"][0]["plan"]
    assert "cuda_graphs=full" in document["baseline"]["plan"]
    assert "precision=fp8" in document["baseline"]["plan"]
    assert "host_overhead" not in document["plans"][0]["breakdown"]
    eager = refine(space, parse_plan("tp=1,pp=1,ep=8,mbs=1,recompute=none,zero=1,precision=fp8"))
    assert document["plans"][0]["step_time_s"] < eager.step_time_s
