"""Safe YAML/JSON reading and atomic writing shared by every loader and writer."""

from __future__ import annotations

import copy
import json
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from windtunnel.specs.bounds import MAX_CONFIG_BYTES, check_file_size
from windtunnel.specs.errors import WindtunnelError

_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_text(path: Path, limit: int = MAX_CONFIG_BYTES) -> str:
    """A user file's text; a missing, unreadable, binary or oversized (> ``limit`` bytes) file is one clear error."""
    check_file_size(path, limit)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise WindtunnelError(f"File not found: '{path}'.") from exc
    except IsADirectoryError as exc:
        raise WindtunnelError(f"'{path}' is a directory, not a file.") from exc
    except UnicodeDecodeError as exc:
        raise WindtunnelError(f"'{path}' is not UTF-8 text (byte {exc.start}); give a text file.") from exc
    except OSError as exc:
        raise WindtunnelError(f"Cannot read '{path}': {exc.strerror}.") from exc


def exists(path: str | Path, kind: str = "any") -> bool:
    """Whether ``path`` is an existing file system entry (``kind`` 'file' or 'dir' for that kind only); False for
    text that cannot be a path (a name too long for the file system, a NUL byte) instead of an OSError."""
    try:
        path = Path(path)
        return path.is_file() if kind == "file" else path.is_dir() if kind == "dir" else path.exists()
    except (OSError, ValueError):
        return False


def read_yaml(path: str | Path) -> Any:
    """Load a YAML file with ``safe_load``; malformed files raise a WindtunnelError naming the line."""
    path = Path(path)
    text = read_text(path)
    try:
        # The C-accelerated safe loader when PyYAML has it: same safety (no arbitrary objects), faster.
        return yaml.load(text, Loader=_SAFE_LOADER)
    except RecursionError as exc:
        raise WindtunnelError(f"YAML in '{path}' is nested too deeply to be a configuration file.") from exc
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise WindtunnelError(
            f"Malformed YAML in '{path}'{where}: {problem}. Fix the syntax (indentation, colons, quotes) and retry."
        ) from exc


def read_mapping_file(text: str, *, what: str, field: str, expected: str) -> tuple[dict, Path] | None:
    """If ``text`` names a .yaml/.yml file, its mapping and path; None when it is not a YAML path (the
    caller parses its string form). A missing file or a document that is not a mapping is a clear
    error naming ``field``; ``expected`` says what the mapping should hold."""
    path = Path(text)
    if path.suffix not in (".yaml", ".yml"):
        return None
    if not exists(path):
        raise WindtunnelError(f"{what} file not found: '{path}' (field '{field}').", field=field)
    doc = read_yaml(path)
    if not isinstance(doc, dict):
        raise WindtunnelError(f"{what} file '{path}' must be a mapping {expected}.", field=field)
    return doc, path


def read_json(path: str | Path, limit: int = MAX_CONFIG_BYTES) -> Any:
    """Load a JSON file; malformed files raise a WindtunnelError naming the line."""
    path = Path(path)
    text = read_text(path, limit)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise WindtunnelError(f"Malformed JSON in '{path}' at line {exc.lineno}, column {exc.colno}: {exc.msg}.") from exc
    except RecursionError as exc:  # nesting deeper than Python's recursion limit: no config is shaped like that
        raise WindtunnelError(f"JSON in '{path}' is nested too deeply to be a configuration file.") from exc


def catalog_dir(*parts: str) -> Path:
    """Path of a folder inside the built-in catalog (package data)."""
    return Path(str(resources.files("windtunnel") / "catalog")).joinpath(*parts)


def write_atomic(path: str | Path, text: str) -> None:
    """Write text to ``path`` through a temporary file and a rename, so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def deep_merge(base: dict, override: dict | None) -> dict:
    """``override`` laid over ``base``: mappings merge key by key (recursively), anything else replaces; the
    inputs are not changed (leaves are copied)."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
