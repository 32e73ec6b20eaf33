"""avail target: the answer follows every input (faults, policy, checkpoint interval, detection, spares), and the
chosen point, re-simulated, meets the target within the simulation's confidence interval."""

import functools
import json

import pytest
from typer.testing import CliRunner

from windtunnel.avail.scenario import make_scenario
from windtunnel.avail.target import availability_target, scaled_rates
from windtunnel.cli.app import app

BASE = dict(step_time_s=10.0, horizon_s=20 * 86400.0, devices_per_node=8)


def _target(faults="catalog:meta-rsc1", policy="hot-spare,spares=8", ettr=0.9, **kw):
    sc = make_scenario(1024, faults, policy, **BASE)
    return availability_target(sc, availability=0.99, ettr=ettr, replications=40, **kw)


def _answer(out):
    return [(r["knob"], r["value"]) for r in out["rows"]]


def test_answer_changes_with_faults_policy_and_checkpoint_interval():
    base = _answer(_target())
    assert _answer(_target(faults="catalog:meta-rsc2")) != base
    assert _answer(_target(policy="restart-from-checkpoint,spares=8")) != base
    assert _answer(_target(policy="restart-from-checkpoint,spares=8,checkpoint-every=10min")) != \
        _answer(_target(policy="restart-from-checkpoint,spares=8,checkpoint-every=2h"))
    assert _answer(_target(policy="hot-spare,spares=8,detect=5min")) != base


def test_boundaries_are_boundaries():
    out = _target(ettr=None)
    rows = {r["knob"]: r for r in out["rows"]}
    det = rows["detection"]
    assert det["status"] == "boundary" and det["availability"] == pytest.approx(0.99, abs=2e-4)
    sc = make_scenario(1024, "catalog:meta-rsc1", "hot-spare,spares=8", **BASE)
    fr = rows["failure-rate"]
    worse = availability_target(scaled_rates(sc, 1.2 * fr["value"] / fr["given"]), availability=0.99,
                                replications=5)
    assert worse["baseline"]["availability"] < 0.99


def test_chosen_point_resimulated_meets_target():
    out = _target()
    c = out["chosen"]
    assert c is not None and c["meets_target"]
    lo, hi = c["simulated_availability_ci95"]
    assert lo - 0.003 <= 0.99 <= hi + 0.003 or lo >= 0.99


def test_unreachable_and_bad_target():
    from windtunnel.specs.errors import WindtunnelError

    out = _target(policy="restart-from-checkpoint,spares=0,restart=6h")
    assert any(r["value"] is None and r["status"] == "unreachable" for r in out["rows"])
    with pytest.raises(WindtunnelError):
        availability_target(make_scenario(64, "catalog:meta-rsc1", "hot-spare", **BASE), availability=1.5)


def test_cli_json_deterministic():
    args = ["avail", "target", "--availability", "0.99", "--devices", "1024", "--devices-per-node", "8",
            "--faults", "catalog:meta-rsc1", "--policy", "hot-spare,spares=8", "--horizon", "10d",
            "--replications", "20", "--json"]
    a = CliRunner().invoke(app, args)
    b = CliRunner().invoke(app, args)
    assert a.exit_code == 0, a.output
    assert a.output == b.output
    doc = json.loads(a.output)
    assert {"rows", "chosen", "baseline", "policies"} <= set(doc)


@pytest.mark.parametrize("extra", [["--rate-scale", "2"], ["--repair", "3d"], ["--spares", "0"], ["--restart", "5min"],
                                   ["--checkpoint-cost", "5min"], ["--checkpoint-every", "2h"], ["--step-time", "40s"],
                                   ["--faults", "catalog:meta-rsc2"], ["--policy", "elastic-shrink"]])
def test_every_input_moves_the_answer(extra):
    assert _target_cli() != _target_cli(*extra)


CLI_BASE = ("avail", "target", "--availability", "0.99", "--ettr", "0.9", "--devices", "512", "--devices-per-node", "8",
            "--faults", "catalog:meta-rsc1", "--policy", "restart-from-checkpoint", "--horizon", "3d",
            "--replications", "3", "--json")


@functools.cache
def _target_cli(*extra: str) -> dict:
    base = list(CLI_BASE)
    for option in extra[::2]:  # an option given once (a repeat is an error): the extra value replaces the base's
        if option in base:
            del base[base.index(option):base.index(option) + 2]
    out = json.loads(CliRunner().invoke(app, [*base, *extra]).output)
    return {k: json.dumps(out[k], sort_keys=True) for k in ("rows", "baseline", "policies")}
