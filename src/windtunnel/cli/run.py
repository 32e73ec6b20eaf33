"""`windtunnel run scenario.yaml [--json]`: rerun a study from a file that can be shared.

A scenario file is one study or a list of them (``studies:``), each naming its ``kind`` - a verb of the
command line, ``train-simulate``, ``train-search``, ``train-job`` (or ``job``), ``infer-simulate``,
``infer-search``, ``infer-dynamic``, ``avail-simulate``, ``avail-markov``, ``compare-train``, ... (see
KINDS) - and that verb's options as keys (``global_batch`` or ``global-batch``; a repeatable option takes a
list). Each study is validated with pydantic against the verb's own options before anything runs (an unknown
key, a wrong type or a missing option is one clear error naming the study and the key; YAML is read with
safe_load), then run as the verb; ``--json`` prints the verb's JSON (one study) or ``{"studies": [...]}``.
Quantities keep their units as on the command line (``checkpoint_every: 30min``; a bare 30 is refused).
Relative file paths are taken from the scenario file's folder."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import typer

from windtunnel.specs.errors import WindtunnelError, choices_text, did_you_mean

GROUPS = ("train", "infer", "avail", "compare")
_NOT_KEYS = {"as_json", "help"}
_ALIASES = {"job": "train-job"}


def kinds(root) -> dict[str, tuple[list[str], Any]]:
    """kind -> (command path, click command) for every verb a scenario can run."""
    out: dict[str, tuple[list[str], Any]] = {}
    for group in GROUPS:
        command = root.commands.get(group)
        for name, verb in sorted(getattr(command, "commands", {}).items()):
            if "json" in {p.name for p in verb.params} or any("--json" in getattr(p, "opts", []) for p in verb.params):
                out[f"{group}-{name}"] = ([group, name], verb)
    return out


def _key(param) -> str:
    """A study key: the option's name (``--global-batch`` -> global_batch, ``--plan`` -> plan)."""
    return param.opts[0].lstrip("-").replace("-", "_")


def _options(command) -> dict:
    """study key -> option of the verb."""
    return {_key(p): p for p in command.params
            if getattr(p, "opts", None) and p.opts[0].startswith("--") and p.name not in _NOT_KEYS}


def _study_model(kind: str, command):
    """A pydantic model of the verb's options (extra keys forbidden)."""
    from pydantic import ConfigDict, create_model

    fields: dict[str, Any] = {}
    for key, param in _options(command).items():
        bare = param.bare_type() if hasattr(param, "bare_type") else "str"
        bare = bare[5:-1] if bare.startswith("list[") else bare
        kind_of = {"int": int, "float": float, "bool": bool}.get(bare, str)
        if getattr(param, "is_flag", False):
            kind_of = bool
        annotation: Any = list[kind_of] if param.multiple else kind_of
        fields[key] = (annotation | None, ...) if param.required else (annotation | None, None)
    return create_model(f"Study_{kind.replace('-', '_')}", __config__=ConfigDict(extra="forbid"), **fields)


def _coerce(study: dict, model) -> dict:
    """YAML numbers given to text options become text (so '30' meets the same unit check as on the command
    line); a single value given to a repeatable option becomes a one-item list."""
    out = {}
    for key, value in study.items():
        info = model.model_fields.get(key)
        text = info is not None and "str" in str(info.annotation)
        if text and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if info is not None and "list" in str(info.annotation) and not isinstance(value, list):
            value = [value]
        if text and isinstance(value, list):
            value = [str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for v in value]
        out[key] = value
    return out


def _check_units(values: dict) -> None:
    """Quantities checked before any study runs (the verb checks them again): durations, bandwidths, SLOs."""
    from windtunnel.avail.units import parse_duration
    from windtunnel.infer.metrics import parse_slo
    from windtunnel.job.units import parse_bandwidth

    durations = ("checkpoint_every", "checkpoint_cost", "checkpoint_stall", "repair", "detect", "restart", "step_time",
                 "horizon", "timeline_bin", "mtbf", "switch_cost", "interval", "startup")
    for key, value in values.items():
        if value is None:
            continue
        if key in durations:
            parse_duration(value, key.replace("_", "-"))
        elif key == "storage_bandwidth":
            parse_bandwidth(value)
        elif key == "slo":
            parse_slo(value)


def _local(value: Any, folder: Path) -> Any:
    """A relative path that names a file next to the scenario file, made absolute (also after trace:)."""
    if isinstance(value, list):
        return [_local(v, folder) for v in value]
    if not isinstance(value, str) or not value:
        return value
    prefix, rest = ("trace:", value[6:]) if value.startswith("trace:") else ("", value)
    head, sep, tail = rest.partition(",")
    if not Path(head).is_absolute() and (folder / head).exists() and len(head) < 4096:
        return prefix + str(folder / head) + sep + tail
    return value


def _argv(values: dict, command) -> list[str]:
    args: list[str] = []
    params = _options(command)
    for key, value in values.items():
        if value is None:
            continue
        param = params[key]
        if getattr(param, "is_flag", False):
            if value:
                args.append(param.opts[0])
            elif param.secondary_opts:
                args.append(param.secondary_opts[0])
            continue
        for item in value if isinstance(value, list) else [value]:
            args += [param.opts[0], str(item)]
    return args


def load_studies(path: Path, root) -> list[tuple[str, str, list[str]]]:
    """(name, kind, argv) of every study in the scenario file, all validated before any runs."""
    from pydantic import ValidationError

    from windtunnel.specs.yamlio import read_yaml

    doc = read_yaml(path)
    if isinstance(doc, dict) and "studies" in doc:
        extra = sorted(set(doc) - {"studies", "name", "description"})
        if extra:
            raise WindtunnelError(f"Scenario '{path}': unknown top-level key '{extra[0]}'; a scenario with several "
                                  "studies takes studies, name, description.", field=extra[0])
        studies = doc["studies"]
    else:
        studies = [doc]
    if not isinstance(studies, list) or not studies or not all(isinstance(s, dict) for s in studies):
        raise WindtunnelError(f"Scenario '{path}' must be a mapping with 'kind' and the verb's options, or "
                              "'studies:' followed by a list of such mappings.", field="studies")
    known = kinds(root)
    out = []
    for index, study in enumerate(studies):
        study = {str(k).replace("-", "_"): v for k, v in study.items()}
        name = str(study.pop("name", f"study {index + 1}"))
        study.pop("description", None)
        where = f"Scenario '{path}', {name}"
        kind = str(study.pop("kind", "") or "").strip().lower()
        kind = _ALIASES.get(kind, kind)
        if kind not in known:
            raise WindtunnelError(f"{where}: field 'kind' is '{kind or '(missing)'}'{did_you_mean(kind, known)}; valid "
                                  f"kinds: {choices_text(known)}.", field="kind")
        verb, command = known[kind]
        for key in ("json", "as_json"):
            if key in study:
                raise WindtunnelError(f"{where}: key '{key}' is not a study option (`windtunnel run --json` prints "
                                      "JSON).", field=key)
        model = _study_model(kind, command)
        try:
            values = model.model_validate(_coerce(study, model)).model_dump(exclude_unset=True)
        except ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(str(p) for p in first["loc"])
            options = sorted(model.model_fields)
            hint = did_you_mean(key, options) if first["type"] == "extra_forbidden" else ""
            raise WindtunnelError(f"{where} (kind {kind}): key '{key}' {first['msg'].lower()}{hint}; options of "
                                  f"`windtunnel {' '.join(verb)}`: {', '.join(options)}.", field=key) from None
        try:
            _check_units(values)
        except WindtunnelError as exc:
            raise WindtunnelError(f"{where} (kind {kind}): {exc}", field=exc.field) from None
        values = {k: _local(v, path.parent) for k, v in values.items()}
        out.append((name, kind, [*verb, *_argv(values, command)]))
    return out


def _invoke(root, argv: list[str]) -> str:
    """Run one verb in this process; its stdout."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        root.main(args=argv, prog_name="windtunnel", standalone_mode=False)
    return buffer.getvalue()


def register(app: typer.Typer) -> None:
    """`windtunnel run` on the root app."""

    @app.command("run")
    def run_cmd(scenario: Path = typer.Argument(..., help="Scenario YAML: one study (kind: train-simulate, "
                                                "train-search, infer-simulate, infer-search, avail-markov, job, ...) "
                                                "or 'studies:' with a list of them; keys are the verb's options."),
                as_json: bool = typer.Option(False, "--json", help="Print the studies' JSON (as the verbs print it)."),
                ) -> None:
        """Run the studies of a scenario file (validated first), as the verbs they name would."""
        root = typer.main.get_command(app)
        studies = load_studies(scenario, root)
        results = []
        for name, kind, argv in studies:
            try:
                if as_json:
                    text = _invoke(root, [*argv, "--json"])
                    results.append({"name": name, "kind": kind, "command": "windtunnel " + " ".join(argv),
                                    "result": json.loads(text)})
                else:
                    sys.stdout.write(f"== {name}: windtunnel {' '.join(argv)}\n")
                    sys.stdout.flush()
                    _invoke_text(root, argv)
            except WindtunnelError as exc:
                raise WindtunnelError(f"Scenario '{scenario}', {name} (kind {kind}): {exc}", field=exc.field) from None
        if as_json:
            from windtunnel.report.jsonout import dumps

            document = results[0]["result"] if len(results) == 1 else {"scenario": str(scenario), "studies": results}
            sys.stdout.write(dumps(document, indent=2, sort_keys=True) + "\n")


def _invoke_text(root, argv: list[str]) -> None:
    root.main(args=argv, prog_name="windtunnel", standalone_mode=False)
