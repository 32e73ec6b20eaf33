"""Provenance of a JSON result, added in the one place every ``--json`` goes through (report.jsonout.dumps):
the windtunnel version, the command and its inputs as resolved by the command line (defaults filled in), a
digest of the built-in catalog (chips, clusters, models, stacks, efficiencies, calibration, fault profiles)
and of every input file (model/cluster/deployment/traffic YAML, calibration profile, fault profile), so a
result says what produced it and can be rerun."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any

KEY = "provenance"
_SKIP = {"as_json", "help"}


@lru_cache(maxsize=1)
def version() -> str:
    """The installed windtunnel version."""
    try:
        from importlib.metadata import version as installed

        return installed("windtunnel")
    except Exception:  # noqa: BLE001 - a source tree without metadata still answers
        return "unknown"


@lru_cache(maxsize=1)
def catalog_digest() -> dict:
    """sha256 over the catalog's files (relative path and bytes, sorted), and how many files it covers."""
    from windtunnel.specs.yamlio import catalog_dir

    root = catalog_dir()
    digest = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return {"sha256": digest.hexdigest()[:16], "files": len(files)}


def _file_digest(value: str) -> str | None:
    try:
        path = Path(value)
        if len(value) < 4096 and path.is_file():
            return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except (OSError, ValueError):
        return None
    return None


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def current_inputs() -> tuple[str, dict] | None:
    """(command, its parameters) of the windtunnel command running now, or None outside one."""
    try:
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover - another typer layout
        return None
    ctx = get_current_context(silent=True)
    if ctx is None:
        return None
    params = {k: _plain(v) for k, v in sorted(ctx.params.items()) if k not in _SKIP}
    words = ctx.command_path.split(" ")[1:]  # the program name varies (python -m, a test runner): say windtunnel
    return " ".join(["windtunnel", *words]), params


def provenance(command: str | None = None, inputs: dict | None = None) -> dict:
    """The provenance block of a result of ``command`` run with ``inputs``."""
    inputs = dict(inputs or {})
    files: dict[str, str] = {}
    for value in inputs.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                text = item.split(":", 1)[1] if item.startswith(("trace:", "catalog:")) else item
                text = text.split(",", 1)[0]
                digest = _file_digest(text)
                if digest:
                    files[text] = digest
    return {"command": command, "inputs": inputs, "catalog": catalog_digest(), "input_files_sha256": files}


def stamp(data: Any) -> Any:
    """``data`` with ``windtunnel_version`` and the provenance block when it is a result (a mapping) printed by a
    windtunnel command; anything else, or a result already stamped, unchanged."""
    if not isinstance(data, dict) or KEY in data:
        return data
    found = current_inputs()
    if found is None:
        return data
    command, inputs = found
    return {**data, "windtunnel_version": version(), KEY: provenance(command, inputs)}
