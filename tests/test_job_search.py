"""train search --faults: refined plans carry goodput after faults and both ranks."""

import json

from typer.testing import CliRunner

from windtunnel.cli.app import app


def test_search_with_faults_ranks_by_goodput(tmp_path):
    args = ["train", "search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "64", "--seq-len", "4096",
            "--global-batch", "128", "--top", "6", "--refine", "8", "--workers", "1", "--json",
            "--state", str(tmp_path / "s.json"), "--faults", "catalog:meta-rsc1", "--policy", "elastic-shrink,spares=0"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)  # progress lines go to stderr
    plans = doc["plans"]
    assert all({"goodput_tokens_per_s", "rank_with_faults", "rank_fault_free", "ettr"} <= set(p) for p in plans)
    assert sorted(p["rank_with_faults"] for p in plans) == list(range(1, len(plans) + 1))
    for p in plans:
        assert p["goodput_tokens_per_s"] == p["tokens_per_s"] * p["ettr"] and 0 < p["ettr"] < 1
    fa = doc["failure_aware"]
    ranked = [r["goodput_tokens_per_s"] for r in fa["ranking"]]
    assert ranked == sorted(ranked, reverse=True)
    # elastic shrink loses a whole replica per failed node: plans with bigger replicas lose more
    by_replica = {}
    for p in plans:
        by_replica.setdefault(p["replica_devices"], set()).add(round(p["ettr"], 6))
    if len(by_replica) > 1:
        small, big = min(by_replica), max(by_replica)
        assert min(by_replica[small]) >= max(by_replica[big])
