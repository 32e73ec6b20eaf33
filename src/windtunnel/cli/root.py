"""The root of the `windtunnel` command: ``--version``, and one rule for every verb: an option that takes one
value, given twice, is one clear error (the last one silently winning hides a typo or a wrong comparison);
options that compare (``compare train --plan A --plan B``) or accumulate (``--what-if``, ``--pin``) repeat."""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from windtunnel.specs.errors import WindtunnelError

# Where a repeated option means "compare": the verb that does it.
_COMPARE = {
    ("train simulate", "--plan"): "windtunnel compare train --plan A --plan B",
    ("train simulate", "--hardware"): "windtunnel compare train --hardware A --hardware B",
    ("train simulate", "--framework"): "windtunnel compare train --framework A --framework B",
}


def _version(value: bool) -> None:
    if value:
        from windtunnel import __version__

        typer.echo(f"windtunnel {__version__}")
        raise typer.Exit(0)


def _leaf(command, tokens: list[str]) -> tuple[object, list[str], list[str]]:
    """(leaf command, its path, its argument tokens) for ``tokens`` = the words after the root's options."""
    path: list[str] = []
    while tokens and hasattr(command, "commands") and tokens[0] in command.commands:
        path.append(tokens[0])
        command, tokens = command.commands[tokens[0]], tokens[1:]
    return command, path, tokens


def repeated_options(command, tokens: list[str]) -> tuple[str, list[str], str] | None:
    """(option, its values, command path) of the first single-valued option given more than once, or None."""
    leaf, path, args = _leaf(command, list(tokens))
    single: dict[str, str] = {}
    takes_value: set[str] = set()
    for param in getattr(leaf, "params", []):
        opts = [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]
        if not opts or getattr(param, "is_flag", False) or param.__class__.__name__.endswith("Argument"):
            continue
        takes_value.update(opts)
        if not getattr(param, "multiple", False):
            single.update({opt: opts[0] for opt in opts})
    seen: dict[str, list[str]] = {}
    index = 0
    while index < len(args):
        token = args[index]
        if token == "--":
            break
        name, has_value, value = token.partition("=")
        if name in takes_value:
            if not has_value:
                value = args[index + 1] if index + 1 < len(args) else ""
                index += 1
            if name in single:
                seen.setdefault(single[name], []).append(value)
        index += 1
    for option, values in seen.items():
        if len(values) > 1:
            return option, values, " ".join(path)
    return None


def check_repeats(command, tokens: list[str]) -> None:
    """Raise the one clear error for a single-valued option of the verb ``tokens`` name given twice."""
    found = repeated_options(command, tokens)
    if found is None:
        return
    option, values, verb = found
    shown = ", ".join(f"'{v}'" for v in values)
    hint = _COMPARE.get((verb, option))
    advice = (f" To see them side by side, use `{hint} ...`." if hint else
              " Give it once (the last value would otherwise silently win).")
    raise WindtunnelError(f"Option '{option}' was given {len(values)} times ({shown}); `windtunnel {verb}` takes one "
                          f"value.{advice}", field=option.lstrip("-").replace("-", "_"))


class RootGroup(TyperGroup):
    """The root group: sees the whole command line before any verb parses it."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if "--help" not in args:
            check_repeats(self, [a for a in args if a != "--version"])
        return super().parse_args(ctx, args)


def register(app: typer.Typer) -> None:
    """Install the root group and callback (``--version``, the repeated-option rule) on ``app``."""
    app.info.cls = RootGroup

    @app.callback()
    def root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                          help="Print the windtunnel version and exit.")) -> None:
        """windtunnel: rehearse LLM training and serving on a simulated cluster."""
