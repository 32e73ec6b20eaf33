"""train job: the whole-run rehearsal (JSON contract, phases, faults, checkpoint cost, energy, price, units)."""

import json

import pytest
from typer.testing import CliRunner

from windtunnel.cli.app import app
from windtunnel.job.costs import checkpoint_cost
from windtunnel.job.run import JobInputs, Phase, job_timeline, parse_phase, rehearse_job
from windtunnel.job.units import parse_bandwidth, parse_device_hour_price, parse_tokens
from windtunnel.specs.errors import WindtunnelError

PHASE = Phase(name="p", seq_len=4096, tokens=2e11, global_batch=256, plan="tp=2,pp=1")


def _job(**kw):
    inp = JobInputs(model="llama3-8b", hardware="h100-sxm", devices=64, replications=5, **kw)
    return rehearse_job(inp, [PHASE])


def test_contract_and_price():
    d = _job()
    for key in ("time_to_train_s", "device_hours", "energy_kwh", "cost", "ettr", "interruptions", "phases"):
        assert key in d
    assert d["cost"] is None
    p = d["phases"][0]
    assert p["step_time_s"] > 0 and p["tokens_per_s"] > 0
    assert d["time_to_train_s"] == pytest.approx(p["fault_free_time_s"] / p["ettr"])
    assert d["device_hours"] == pytest.approx(64 * d["time_to_train_s"] / 3600)
    priced = _job(price_per_device_hour=2.0)
    assert priced["cost"] == pytest.approx(2.0 * priced["device_hours"])
    assert d["energy_kwh"] > 0  # the catalog's 700 W H100 board power


def test_faults_policy_and_checkpoint_move_the_answer():
    base = _job()
    more = _job(faults="catalog:meta-rsc1")
    assert more["time_to_train_s"] != base["time_to_train_s"]
    hot = _job(policy="hot-spare,spares=2")
    assert hot["ettr"] > base["ettr"]
    fixed = _job(checkpoint_every_s=6 * 3600.0)
    assert fixed["phases"][0]["checkpoint"]["every_s"] >= 6 * 3600.0
    assert fixed["ettr"] < base["ettr"]  # Daly's interval beats a 6 h one


def test_checkpoint_rule_follows_zero():
    kw = dict(devices=64, dp=32, moments="fp32", storage_bandwidth_bytes_per_s=1e12, host_link_bytes_per_s=5e10)
    z1 = checkpoint_cost(8_000_000_000, zero=1, **kw)
    z0 = checkpoint_cost(8_000_000_000, zero=0, **kw)
    assert z1.total_bytes == z0.total_bytes == 8e9 * 14
    assert z1.writer_ranks == 64 and z0.writer_ranks == 2
    assert z0.write_s > z1.write_s


def test_energy_rule_and_pue():
    a = _job(device_power_w=1000.0)
    b = _job(device_power_w=1000.0, pue=1.5)
    assert b["energy_kwh"] == pytest.approx(1.5 * a["energy_kwh"])
    upper = 64 * 1000.0 * a["time_to_train_s"] / 3.6e6
    assert 0.15 * upper < a["energy_kwh"] < upper


def test_units_are_required():
    assert parse_tokens("15.6T") == 15.6e12
    assert parse_bandwidth("400Gb/s") == 50e9
    assert parse_device_hour_price("$2.5/gpu-hour") == (2.5, "$")
    for bad in ("2.5", "2.5/hour"):
        with pytest.raises(WindtunnelError):
            parse_device_hour_price(bad)
    with pytest.raises(WindtunnelError):
        parse_bandwidth("2000")
    with pytest.raises(WindtunnelError):
        parse_tokens("many")


def test_phase_parsing():
    p = parse_phase("seq=8192,tokens=15T,batch=16777216tok,plan=tp=8,pp=16,vpp=7", 0)
    assert (p.seq_len, p.tokens, p.global_batch, p.plan) == (8192, 15e12, 2048, "tp=8,pp=16,vpp=7")
    with pytest.raises(WindtunnelError):
        parse_phase("seq=8192,plan=tp=8", 0)


def test_infeasible_phase_is_a_clear_error():
    with pytest.raises(WindtunnelError, match="infeasible"):
        rehearse_job(JobInputs(model="llama3-70b", hardware="h100-sxm", devices=8, replications=2),
                     [Phase(name="p", seq_len=4096, tokens=1e9, global_batch=8, plan="tp=1,pp=1,zero=0")])


def test_timeline_reaches_the_budget():
    d = _job()
    rows = job_timeline(d)
    tokens = [r["tokens"] for r in rows]
    assert tokens == sorted(tokens)
    assert tokens[-1] == pytest.approx(PHASE.tokens, rel=0.05)


def test_cli_two_phases_json_deterministic(tmp_path):
    args = ["train", "job", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "64",
            "--phase", "seq=4096,tokens=100B,batch=256,plan=tp=2", "--phase", "seq=16384,tokens=10B,batch=64,plan=tp=2,cp=2",
            "--price", "2.5/device-hour", "--replications", "5", "--json", "--timeline", str(tmp_path / "t.csv")]
    a = CliRunner().invoke(app, args)
    b = CliRunner().invoke(app, args)
    assert a.exit_code == 0, a.output
    assert a.output == b.output
    assert "NaN" not in a.output and "Infinity" not in a.output
    doc = json.loads(a.output)
    assert len(doc["phases"]) == 2 and doc["cost"] == pytest.approx(2.5 * doc["device_hours"])
    assert (tmp_path / "t.csv").read_text().startswith("t_s,phase,state")
    bad = CliRunner().invoke(app, args[:-3] + ["--price", "2.5"])
    assert isinstance(bad.exception, WindtunnelError) and "device-hour" in str(bad.exception)


def test_phase_plan_search_picks_a_plan_by_goodput():
    inp = JobInputs(model="llama3-8b", hardware="h100-sxm", devices=64, replications=3,
                    policy="elastic-shrink,spares=0")
    d = rehearse_job(inp, [parse_phase("seq=4096,tokens=50B,batch=128,plan=search", 0)])
    p = d["phases"][0]
    assert p["plan_search"]["best_with_faults"] == p["plan"] and p["plan_search"]["refined"] >= 1


def test_phase_devices():
    p = parse_phase("seq=4096,tokens=50B,batch=128,devices=32,plan=tp=2", 0)
    assert p.devices == 32
    inp = JobInputs(model="llama3-8b", hardware="h100-sxm", devices=64, replications=3)
    d = rehearse_job(inp, [p, Phase(name="b", seq_len=4096, tokens=5e10, global_batch=128, plan="tp=2")])
    a, b = d["phases"]
    assert (a["devices"], b["devices"]) == (32, 64)
    assert d["device_hours"] == pytest.approx(a["device_hours"] + b["device_hours"])
    assert a["device_hours"] == pytest.approx(32 * a["wall_s"] / 3600)
