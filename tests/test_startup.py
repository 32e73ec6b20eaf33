"""Start-up: the CLI imports only what a command uses (issue 19). Each check runs a fresh interpreter
and lists the heavy modules it loaded; no timing is asserted (benchmarks/bench_cli.py prints that)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

HEAVY = ("scipy", "pandas", "pyarrow", "plotly", "ray", "torch", "onnx", "pydantic", "yaml", "numpy",
         "windtunnel.api", "windtunnel.train.step", "windtunnel.infer.api", "windtunnel.avail.markov", "windtunnel.profile")


def loaded_after(code: str) -> list[str]:
    """The HEAVY modules a fresh interpreter holds after running ``code``."""
    probe = f"{code}\nimport sys, json\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=str(REPO), check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_cli_help_imports_nothing_heavy():
    """`windtunnel --help` builds the command tree without the pillars, numpy, pydantic or YAML."""
    assert loaded_after("import windtunnel.cli") == []


def test_package_import_is_lazy_and_complete():
    """`import windtunnel` defers the API; its names still resolve on first use."""
    assert loaded_after("import windtunnel") == []
    names = loaded_after("import windtunnel\nassert callable(windtunnel.simulate_training)\n"
                         "assert callable(windtunnel.simulate_serving)\nassert windtunnel.WindtunnelError")
    assert "windtunnel.api" in names and "windtunnel.infer.api" in names


def test_train_simulate_skips_serving_and_availability():
    """A training step loads neither the serving pillar nor scipy's Markov solver."""
    code = ("import sys\nfrom windtunnel.cli import main\nsys.argv = ['windtunnel', 'train', 'simulate', '--model', "
            "'llama3-8b', '--hardware', 'h100-sxm', '--devices', '8', '--seq-len', '2048', '--global-batch', '8', "
            "'--plan', 'tp=1,pp=1,mbs=1,recompute=none,zero=1', '--json']\n"
            "import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main()\n    except SystemExit:\n        pass")
    names = loaded_after(code)
    assert "windtunnel.train.step" in names  # it did simulate
    assert not {"scipy", "windtunnel.infer.api", "windtunnel.avail.markov", "pandas", "ray", "torch"} & set(names)


def test_availability_names_resolve_lazily():
    """windtunnel.avail re-exports on first use; an unknown name is an AttributeError."""
    names = loaded_after("import windtunnel.avail as a\nassert callable(a.solve_markov) and callable(a.simulate)\n"
                         "try:\n    a.nothing\nexcept AttributeError:\n    pass\nelse:\n    raise SystemExit(1)")
    assert "windtunnel.avail.markov" in names
