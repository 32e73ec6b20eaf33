"""Every command the docs show runs as written (issue 18 item 9).

The convention, stated in README.md ("Conventions in this README"):

* A ```bash (or ```sh) block holds commands only: one per line, ``\\`` continues a line, ``#`` starts a
  comment. A command that starts with ``windtunnel`` is run here as ``python -m windtunnel.cli`` with the
  same arguments; one that starts with ``python`` is run with this interpreter. Setup commands (``pip``,
  ``make``, ``git clone``, ``cd``, ``python -m venv``, ``source``) are listed, not run: ``make test`` is
  what runs them. Anything else in a command block fails this test, so no command goes unchecked.
* A ```console block shows a session: lines that start with ``$ `` are commands (same rules), the other
  lines are output and are not compared.
* A ```python block is run as a script.
* A command expected to fail ends with the comment ``# exit N``; every other command must exit 0.
* A block whose info string names a file (```` ```yaml title=my-cluster.yaml ````, any language) is that
  file's contents: it is written into the directory every command block of the same document runs in.
* ```text, other ```yaml and unlabelled blocks are output or file contents and are not run.

Each block is one recipe: its commands run in order in a fresh temporary directory (so a profile written
by one command can be read by the next). Arguments that name a file or folder of the repository
(``validation/traces/...``, ``examples/...``, ``tests/data/...``, also after a ``trace:`` style prefix) are
resolved against the repository root; what a command writes (``--out``, ``--report``, ``--trace``, ...)
lands in the temporary directory, never in the repository. The docs keep their commands small: the
whole module runs in well under 90 s.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "docs" / "ARCHITECTURE.md"]
RUN_LANGS = {"bash", "sh", "console", "python"}
SETUP = ("pip ", "make ", "git clone ", "cd ", "python -m venv ", "python3 -m venv ", "source ", ". .venv/")
# Options whose value is written by the command: never resolved against the repository.
OUTPUT_OPTIONS = {"--out", "--report", "--trace", "--timeline", "--plot", "--bands-out", "--resume-file"}
TIMEOUT_S = 120


@dataclass
class Command:
    line: int
    text: str
    expect: int


@dataclass
class FileBlock:
    doc: Path
    name: str
    body: str


@dataclass
class Block:
    doc: Path
    line: int
    lang: str
    body: str
    commands: list[Command]

    @property
    def id(self) -> str:
        return f"{self.doc.name}:{self.line}"


def _parse(doc: Path) -> tuple[list[Block], list[FileBlock]]:
    blocks, files, lang, title, start, body = [], [], None, None, 0, []
    for number, raw in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        fence = re.match(r"^\s*```(?!`)(\S*)(.*)$", raw)
        if fence and lang is None:
            lang, start, body = fence.group(1).lower(), number, []
            named = re.search(r"\btitle=(\S+)", fence.group(2))
            title = named.group(1) if named else None
        elif fence:
            text = "\n".join(t for _, t in body) + "\n"
            if title:
                assert "/" not in title and not title.startswith("."), f"{doc.name}:{start}: a file block's title is a plain name"
                files.append(FileBlock(doc, title, text))
            elif lang in RUN_LANGS:
                blocks.append(Block(doc, start, lang, text, _commands(lang, body)))
            lang = None
        elif lang is not None:
            body.append((number, raw))
    assert lang is None, f"{doc.name}: a code block opened at line {start} is never closed"
    return blocks, files


def _commands(lang: str, body: list[tuple[int, str]]) -> list[Command]:
    if lang == "python":
        return []
    commands, pending, first = [], "", 0
    for number, raw in body:
        text = raw.rstrip()
        if lang == "console":
            if not pending:
                if not text.startswith("$ "):
                    continue  # output
                text = text[2:]
        elif not pending and (not text.strip() or text.lstrip().startswith("#")):
            continue
        if not pending:
            first = number
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        whole = (pending + text).strip()
        pending = ""
        found = re.search(r"#\s*exit\s+(\d+)\s*$", whole)
        commands.append(Command(first, whole, int(found.group(1)) if found else 0))
    assert not pending, f"a command continued with '\\' never ends (line {first})"
    return commands


PARSED = {doc: _parse(doc) for doc in DOCS if doc.exists()}
ALL_BLOCKS = [b for blocks, _ in PARSED.values() for b in blocks]


def _resolve(token: str) -> str:
    """A repository path (maybe after a 'kind:' prefix) made absolute; anything else unchanged."""
    prefix, rest = "", token
    found = re.match(r"^([a-z][a-z_-]*:)(.+)$", token)
    if found and not token.startswith(("http:", "https:")):
        prefix, rest = found.groups()
    if rest and not rest.startswith(("/", "-")) and (ROOT / rest).exists() and "/" in rest.rstrip("/") + "/":
        return prefix + str(ROOT / rest)
    return token


def _argv(command: Command) -> list[str] | None:
    """The argv to run, or None for a setup command."""
    tokens = shlex.split(command.text, comments=True)
    assert tokens, f"line {command.line}: an empty command"
    if command.text.startswith(SETUP):
        return None
    assert not any("..." in t for t in tokens) and not any(t.startswith("[") for t in tokens), (
        f"line {command.line}: a placeholder ('...' or [optional]) in a command block: {command.text}")
    if tokens[0] == "windtunnel":
        head = [sys.executable, "-m", "windtunnel.cli"]
    elif tokens[0] in ("python", "python3"):
        head = [sys.executable]
    else:
        raise AssertionError(f"line {command.line}: '{tokens[0]}' is neither windtunnel, python nor a setup "
                             f"command; show it in a ```text block or extend the convention: {command.text}")
    args, previous = [], ""
    for token in tokens[1:]:
        option = token.split("=", 1)[0]
        if previous in OUTPUT_OPTIONS or (token.startswith("--") and option in OUTPUT_OPTIONS):
            args.append(token)
        else:
            args.append(_resolve(token))
        previous = token
    return head + args


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["COLUMNS"] = "80"
    env.pop("FORCE_COLOR", None)
    return env


def _run(argv: list[str], cwd: Path, where: str, expect: int) -> None:
    try:
        done = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{where}: ran past {TIMEOUT_S} s (keep README commands small): {' '.join(argv[1:])}")
    assert done.returncode == expect, (
        f"{where}: exit {done.returncode}, expected {expect}: {' '.join(argv[1:])}\n"
        f"--- stdout (tail)\n{done.stdout[-2000:]}\n--- stderr (tail)\n{done.stderr[-3000:]}")
    assert "Traceback (most recent call last)" not in done.stderr, f"{where}: a traceback\n{done.stderr[-3000:]}"


def test_the_docs_have_runnable_blocks():
    assert len([b for b in ALL_BLOCKS if b.doc.name == "README.md"]) >= 10
    assert sum(len(b.commands) for b in ALL_BLOCKS) >= 20


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[b.id for b in ALL_BLOCKS])
def test_block_runs_as_written(block: Block, tmp_path: Path):
    for file in PARSED[block.doc][1]:
        (tmp_path / file.name).write_text(file.body, encoding="utf-8")
    if block.lang == "python":
        script = tmp_path / "block.py"
        script.write_text(block.body, encoding="utf-8")
        _run([sys.executable, str(script)], tmp_path, block.id, 0)
        return
    assert block.commands, f"{block.id}: a ```{block.lang} block without a command (use ```text for output)"
    for command in block.commands:
        argv = _argv(command)
        if argv is not None:
            _run(argv, tmp_path, f"{block.doc.name}:{command.line}", command.expect)


def _prose(doc: Path) -> str:
    """The document without its fenced blocks."""
    lines, inside = [], False
    for raw in doc.read_text(encoding="utf-8").splitlines():
        if re.match(r"^\s*```(?!`)", raw):
            inside = not inside
        elif not inside:
            lines.append(raw)
    return "\n".join(lines)


def _links(doc: Path) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", _prose(doc))


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("doc", [d for d in DOCS if d.exists()], ids=lambda d: d.name)
def test_links_stay_inside_the_repository_and_exist(doc: Path):
    text = doc.read_text(encoding="utf-8")
    assert "../shared" not in text, f"{doc.name} points outside the repository"
    anchors = {_slug(h) for h in re.findall(r"^#+\s+(.+?)\s*$", _prose(doc), re.M)}
    for link in _links(doc):
        if link.startswith("#"):
            assert link[1:] in anchors, f"{doc.name}: link '{link}' names no heading"
            continue
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        target = (doc.parent / link.split("#", 1)[0]).resolve()
        assert target.is_relative_to(ROOT), f"{doc.name}: link '{link}' leaves the repository"
        assert target.exists(), f"{doc.name}: link '{link}' names no file"


def _accuracy_chunks() -> list[tuple[str, set[str]]]:
    """The README's Accuracy section, one bullet or paragraph at a time, with the reports each one links."""
    text = _prose(ROOT / "README.md")
    section = text[text.index("## Accuracy\n"):]
    section = section[:section.index("\n## ", 5)]
    chunks = re.split(r"\n\s*\n|\n(?=\* )", section)
    return [(chunk, set(re.findall(r"\]\((validation/[A-Za-z_]+\.md)\)", chunk))) for chunk in chunks]


def test_accuracy_figures_are_the_reports_own():
    """Every percentage the Accuracy section quotes is written in one of the reports it links (a report
    regenerated with other figures fails here: update the README's figure from the report)."""
    checked = 0
    for chunk, reports in _accuracy_chunks():
        if not reports:
            continue
        written = "".join((ROOT / report).read_text(encoding="utf-8") for report in sorted(reports))
        for figure in re.findall(r"[+-]?\d+(?:\.\d+)?%", chunk):
            assert re.search(rf"(?<![\d.]){re.escape(figure)}", written), (
                f"README's Accuracy section quotes {figure}, which none of {sorted(reports)} contains now: "
                f"update the README from the regenerated report\n{chunk}")
            checked += 1
    assert checked >= 30
