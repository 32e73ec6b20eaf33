"""compare train: plans (or clusters, stacks, what-ifs) side by side in one table, frame, JSON and plot."""

from __future__ import annotations

import json

from windtunnel.insight import compare_training


def test_compare_plans_frame_and_json():
    comparison = compare_training("llama3-8b", "h100-sxm", 16, seq_len=4096, global_batch=32,
                                  plans=["tp=1,mbs=1,zero=1", "tp=2,mbs=1,zero=1", "tp=1,mbs=1,zero=3"])
    frame = comparison.to_frame()
    assert list(frame.index) == ["tp=1,mbs=1,zero=1", "tp=2,mbs=1,zero=1", "tp=1,mbs=1,zero=3"]
    assert {"step_time_s", "tokens_per_s", "mfu", "peak_memory_bytes", "breakdown.compute"} <= set(frame.columns)
    doc = json.loads(json.dumps(comparison.to_json_dict(), allow_nan=False))
    assert doc["entries"][0]["gain"] == 0.0
    assert len({entry["step_time_s"] for entry in doc["entries"]}) == 3


def test_compare_clusters_and_what_ifs_cross(tmp_path):
    comparison = compare_training("llama3-8b", ["h100-sxm", "a100-80g"], 8, seq_len=4096, global_batch=16,
                                  plans=["tp=1,mbs=1"], what_ifs=["", "flops=x2"])
    labels = [label for label, _ in comparison.entries]
    assert labels == ["h100-sxm | base", "h100-sxm | flops=x2", "a100-80g | base", "a100-80g | flops=x2"]
    steps = [result.step_time_s for _, result in comparison.entries]
    assert steps[1] < steps[0] and steps[3] < steps[2]
    path = tmp_path / "compare.html"
    comparison.write_html(path)
    assert "plotly" in path.read_text().lower()


def test_cli_compare_train(cli):
    proc = cli("compare", "train", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8",
               "--global-batch", "16", "--plan", "tp=1,mbs=1", "--plan", "tp=2,mbs=1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["entries"]) == 2
    text = cli("compare", "train", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8",
               "--global-batch", "16", "--plan", "tp=1,mbs=1", "--plan", "tp=2,mbs=1")
    assert text.returncode == 0 and "step time" in text.stdout


def test_explain_and_sensitivity_render_as_frames():
    from windtunnel.insight import explain_training, to_frames, training_sensitivity

    kwargs = dict(seq_len=4096, global_batch=16, plan="tp=1,mbs=1")
    frames = to_frames(explain_training("llama3-8b", "h100-sxm", 8, top=3, **kwargs))
    assert frames["shares"]["share"].sum() == 1.0 or abs(frames["shares"]["share"].sum() - 1.0) < 1e-9
    assert frames["shares"].index[0] == "compute" and len(frames["remedies"]) <= 3
    elasticities = to_frames(training_sensitivity("llama3-8b", "h100-sxm", 8, **kwargs))["elasticities"]
    assert set(elasticities.index) >= {"flops", "hbm_bandwidth"} and set(elasticities["kind"]) == {"resource", "cost"}
