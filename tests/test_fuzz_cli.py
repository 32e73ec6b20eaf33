"""CLI fuzz (issue 20): hundreds of malformed invocations across every verb, replayed in-process through the real
entry point (``windtunnel.cli.main``). Every one must exit 2 with exactly one ``error:`` paragraph on stderr, no
traceback, in under 10 s. Seed and count: WINDTUNNEL_FUZZ_SEED, WINDTUNNEL_FUZZ_CLI_CASES (printed)."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import time
import traceback

from fuzz_cli_cases import BASES, generate

SEED = int(os.environ.get("WINDTUNNEL_FUZZ_SEED", "20"))
COUNT = int(os.environ.get("WINDTUNNEL_FUZZ_CLI_CASES", "320"))
LIMIT_S = 10.0


class CaseTimeout(BaseException):
    """Raised by the alarm inside a case that ran past LIMIT_S (a BaseException, so no handler swallows it)."""


def _alarm(signum, frame):
    raise CaseTimeout()


def run_in_process(argv: list[str], limit_s: float = LIMIT_S) -> tuple[int | str, str, str, float]:
    """(exit code or 'timeout'/'exception', stdout, stderr, seconds) of ``windtunnel ARGV`` run in this process."""
    from windtunnel.cli import main

    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    start = time.perf_counter()
    code: int | str
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except CaseTimeout:
        code = "timeout"
    except BaseException:  # noqa: BLE001 - what escapes main() is exactly what this test looks for
        code = "exception"
        err.write(traceback.format_exc())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - start


def problem(code, stdout: str, stderr: str, seconds: float) -> str | None:
    """Why a refused invocation was not one clear error, or None."""
    if code != 2:
        return f"exit {code}"
    if "Traceback" in stderr or "Traceback" in stdout:
        return "traceback"
    if sum(line.startswith("error:") for line in stderr.splitlines()) != 1:
        return "not exactly one error: line"
    paragraph = stderr[stderr.index("error:"):].strip()
    if "\n\n" in paragraph:
        return "error spans several paragraphs"
    if len(paragraph) > 2000:
        return f"error message of {len(paragraph)} characters (echoed input?)"
    if seconds > LIMIT_S:
        return f"took {seconds:.1f} s"
    return None


def test_every_malformed_invocation_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a search's state file, --out and friends land here
    cases = generate(SEED, COUNT, tmp_path)
    verbs = {" ".join(argv[:2]) if argv[0] != "probe" else "probe" for _, argv in cases}
    assert len(cases) >= 300 and len(verbs) >= len(BASES) - 1
    start = time.perf_counter()
    failures = []
    slowest = (0.0, "")
    for name, argv in cases:
        code, stdout, stderr, seconds = run_in_process(argv)
        slowest = max(slowest, (seconds, name))
        why = problem(code, stdout, stderr, seconds)
        if why:
            failures.append(f"{why}: {name}\n  argv: {' '.join(a[:80] for a in argv)[:400]}\n  "
                            f"{(stderr or stdout).strip()[-600:]}")
    total = time.perf_counter() - start
    print(f"CLI fuzz: seed {SEED}, {len(cases)} cases over {len(verbs)} verbs, {total:.1f} s "
          f"(slowest {slowest[0]:.2f} s: {slowest[1]}), {len(failures)} failures")
    assert not failures, f"{len(failures)} of {len(cases)} (seed {SEED}):\n" + "\n".join(failures[:40])
