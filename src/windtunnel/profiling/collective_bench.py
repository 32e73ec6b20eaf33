"""Parse collective benchmark logs: NVIDIA nccl-tests and Huawei's HCCL Performance Tester (hccl-tests).

Units out: bytes, seconds, bytes/s (the tools print us and GB/s, GB = 1e9 bytes as nccl-tests'
``src/common.cu`` divides by 1.0E9).

**nccl-tests** (``all_reduce_perf``, ``all_gather_perf``, ``reduce_scatter_perf``, ``alltoall_perf``,
``sendrecv_perf``; github.com/NVIDIA/nccl-tests, README.md and doc/PERFORMANCE.md). A run prints a header
(``# nThread 1 nGpus 1 minBytes 8 maxBytes ...``), one ``#  Rank  N Group  G Pid  P on HOST device  D [BUS]
NAME`` line per rank (older versions omit ``Group``), then a table whose rows are
``size count type redop [root] time algbw busbw #wrong time algbw busbw #wrong`` (out-of-place, then
in-place; ``root`` appeared in later versions; ``#wrong`` may be ``N/A`` or, in old versions, an ``error``
float), and ``# Avg bus bandwidth : X``. ``size`` is the whole buffer (bytes), ``time`` in us, bandwidths in
GB/s. The bus bandwidth is the algorithm bandwidth (size / time) times a factor that makes it comparable
with the hardware's link rate (doc/PERFORMANCE.md): 2(n-1)/n for all-reduce, (n-1)/n for reduce-scatter,
all-gather and all-to-all, 1 for send/recv. The log does not name the test binary: the collective comes
from the caller, a ``*_perf`` name echoed in the log or the file name, or (all-reduce only) from
busbw/algbw = 2(n-1)/n.

**hccl-tests** (the HCCL Performance Tester, CANN "HCCL Performance Tester" guide, hiascend.com,
HCCLpertest_16_0005 "Parameters" and HCCLpertest_16_0006 "Result Description"): launched as
``mpirun -n <total NPUs> ./bin/<collective>_test -p <NPUs per node> -b ... -e ... -f ...``; it prints a
table ``data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | check_result:`` (bytes per NPU; us;
GB/s = data size / time; success / failed / NULL; the guide spells the time column ``avg_time``, the binary
``aveg_time``: both are read), separated by ``|`` or spaces. It prints
neither the rank count nor the collective, so they come from the echoed ``mpirun`` line in the log, the
file name (``all_reduce_test``...) or the caller. ``data_size`` is the whole buffer as nccl-tests' ``size``
is: hccl_test's all-gather splits it over the ranks (``init_malloc_Ksize_by_data``) and divides
``malloc_kSize * rank_size`` by the time (``cal_execution_time``; cann/oam-tools ``src/hccl_test``), with
GB = 1e9 (``B_US_TO_GB_S = 1.0E6 / 1.0E9``). The bus bandwidth is derived with nccl-tests' factors.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from windtunnel.specs.errors import WindtunnelError, choices_text
from windtunnel.specs.yamlio import read_text

GB = 1.0e9  # nccl-tests and hccl-tests print GB/s with GB = 1e9 bytes
US = 1.0e-6

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
# Names of the benchmark binaries (nccl-tests *_perf, hccl-tests *_test) -> collective.
_BINARIES = {"all_reduce": "all_reduce", "allreduce": "all_reduce", "all_gather": "all_gather",
             "allgather": "all_gather", "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
             "alltoall": "all_to_all", "all_to_all": "all_to_all", "sendrecv": "send_recv", "send_recv": "send_recv"}
_BINARY_RE = re.compile(r"(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|send_?recv)_(?:perf|test)", re.I)
_RANK_RE = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                      r"\[([^\]]*)\]\s*(.*)$")
_HEADERS = ("# nccl-tests version", "# Collective test starting", "# nThread")
_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_MPIRUN_N_RE = re.compile(r"\bmpirun\b.*?\s-(?:n|np)\s+(\d+)")
_NPUS_RE = re.compile(r"_test\b.*?\s-p\s+(\d+)")


def bus_factor(collective: str, ranks: int) -> float:
    """busbw / algbw for ``collective`` over ``ranks`` (nccl-tests doc/PERFORMANCE.md)."""
    if collective == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (ranks - 1) / ranks
    return 1.0


@dataclass(frozen=True)
class BenchRow:
    """One measured message size: the whole buffer (bytes), time (s), algorithm and bus bandwidth (bytes/s)."""

    size_bytes: float
    time_s: float
    algbw: float
    busbw: float
    in_place: bool
    line: int


@dataclass
class BenchLog:
    """One benchmark run: a collective over ``ranks`` devices on ``hosts`` hosts, and its table rows."""

    path: str
    tool: str
    collective: str
    ranks: int
    ranks_per_host: int
    hosts: int
    devices: list[str] = field(default_factory=list)
    rows: list[BenchRow] = field(default_factory=list)
    avg_busbw: float | None = None

    @property
    def label(self) -> str:
        return f"{Path(self.path).name}: {self.collective} over {self.ranks} ranks on {self.hosts} host(s)"


def _collective_from(text: str, path: Path, given: str | None) -> str | None:
    if given:
        key = given.lower().replace("-", "_")
        if key not in _BINARIES:
            raise WindtunnelError(f"Collective '{given}' (field 'collective') is not one of {choices_text(COLLECTIVES)}.",
                                  field="collective")
        return _BINARIES[key]
    for source in (text, path.name):
        match = _BINARY_RE.search(source)
        if match:
            return _BINARIES[match.group(1).lower()]
    return None


def _number(token: str, path: Path, line: int, what: str) -> float:
    try:
        return float(token)
    except ValueError as exc:
        raise WindtunnelError(f"Benchmark log '{path}' line {line}: {what} is '{token}', not a number; the table "
                              "row must hold numbers in the columns nccl-tests/hccl-tests print.") from exc


def _nccl_row_values(tokens: list[str], path: Path, line: int) -> list[tuple[float, float, float, bool]]:
    """(time s, algbw B/s, busbw B/s, in_place) of a table row, out-of-place first."""
    # size count type redop [root] then groups of (time algbw busbw wrong)
    rest = tokens[5:] if len(tokens) >= 13 else tokens[4:]
    out = []
    for index, in_place in ((0, False), (4, True)):
        group = rest[index:index + 4]
        if len(group) < 3:
            continue
        wrong = group[3] if len(group) > 3 else "0"
        if wrong not in ("N/A", "0") and _is_number(wrong) and float(wrong) > 0 and "e" not in wrong.lower():
            raise WindtunnelError(f"Benchmark log '{path}' line {line}: {wrong} wrong results reported "
                                  f"({'in' if in_place else 'out-of'}-place); a run that fails validation "
                                  "cannot be calibrated on. Fix the run or remove the row.")
        time_us = _number(group[0], path, line, "time")
        out.append((time_us * US, _number(group[1], path, line, "algbw") * GB,
                    _number(group[2], path, line, "busbw") * GB, in_place))
    return out


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def parse_nccl_tests(text: str, path: Path, collective: str | None = None) -> list[BenchLog]:
    """Every run (``# nThread`` section) of an nccl-tests log."""
    # A file may hold several runs: each starts at its header lines ("# nccl-tests version", "# Collective test
    # starting: <binary>", "# nThread ..."), once the previous run has printed rank lines or rows.
    sections: list[list[tuple[int, str]]] = [[]]
    body = False
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw.startswith(_HEADERS) and body:
            sections.append([])
            body = False
        body = body or bool(_RANK_RE.match(raw.strip())) or raw.strip()[:1].isdigit()
        sections[-1].append((number, raw.rstrip()))
    logs = []
    whole = _collective_from(text, path, collective) if len(sections) == 1 else None
    for lines in sections:
        name = whole or _collective_from("\n".join(line for _, line in lines), path, collective)
        ranks: dict[int, tuple[str, str]] = {}
        rows: list[BenchRow] = []
        avg = None
        in_table = False
        for number, line in lines:
            stripped = line.strip()
            rank = _RANK_RE.match(stripped)
            if rank:
                ranks[int(rank.group(1))] = (rank.group(2), rank.group(5).strip())
                continue
            avg_match = _AVG_RE.match(stripped)
            if avg_match:
                avg = float(avg_match.group(1)) * GB
                continue
            if stripped.startswith("#") and "size" in stripped and "count" in stripped and "busbw" in stripped:
                in_table = True
                continue
            if not in_table or not stripped or stripped.startswith("#"):
                continue
            tokens = stripped.split()
            if not tokens[0].isdigit() or len(tokens) < 7:
                continue
            size = float(tokens[0])
            for time_s, algbw, busbw, in_place in _nccl_row_values(tokens, path, number):
                rows.append(BenchRow(size, time_s, algbw, busbw, in_place, number))
        if not rows:
            continue
        if not ranks:
            raise WindtunnelError(f"nccl-tests log '{path}' has a result table but no '#  Rank N ... on HOST device D' "
                                  "lines, so the group size and the rank-to-host mapping are unknown; keep the "
                                  "'# Using devices' block nccl-tests prints.")
        logs.append(_with_hosts(path, "nccl-tests", name, ranks, rows, avg))
    if not logs:
        raise WindtunnelError(f"No nccl-tests result table found in '{path}': expected a header line with "
                              "'size count type redop ... time algbw busbw' followed by numeric rows.")
    return logs


def _with_hosts(path: Path, tool: str, name: str | None, ranks: dict[int, tuple[str, str]], rows: list[BenchRow],
                avg: float | None) -> BenchLog:
    count = len(ranks)
    per_host = Counter(host for host, _ in ranks.values())
    if len(set(per_host.values())) > 1:
        raise WindtunnelError(f"Benchmark log '{path}' places its {count} ranks unevenly over hosts "
                              f"({dict(sorted(per_host.items()))}); only even layouts are supported.")
    if name is None:
        name = _infer_from_ratio(rows, count, path)
    log = BenchLog(str(path), tool, name, count, next(iter(per_host.values())), len(per_host),
                   sorted({device for _, device in ranks.values()}), rows, avg)
    _check_bus_factor(log)
    return log


def _infer_from_ratio(rows: list[BenchRow], ranks: int, path: Path) -> str:
    """All-reduce is told apart by busbw/algbw = 2(n-1)/n; the (n-1)/n collectives are not."""
    ratios = [row.busbw / row.algbw for row in rows if row.algbw >= GB]
    if ranks > 1 and ratios and abs(sorted(ratios)[len(ratios) // 2] - bus_factor("all_reduce", ranks)) < 0.02:
        return "all_reduce"
    raise WindtunnelError(f"Cannot tell which collective '{path}' measured: the log names no *_perf/*_test binary "
                          "and its busbw/algbw ratio does not single one out. Pass --collective (one of "
                          f"{choices_text(COLLECTIVES)}) or name the file after the binary (e.g. all_gather_perf.log).",
                          field="collective")


def _check_bus_factor(log: BenchLog) -> None:
    """The printed busbw must be algbw times the collective's factor: a mislabelled log is an error."""
    factor = bus_factor(log.collective, log.ranks)
    for row in log.rows:
        if row.algbw >= GB and abs(row.busbw / row.algbw - factor) > 0.02 * factor + 0.01:
            raise WindtunnelError(
                f"Benchmark log '{log.path}' line {row.line}: busbw/algbw is {row.busbw / row.algbw:.3f}, but "
                f"{log.collective} over {log.ranks} ranks has bus factor {factor:.3f} (nccl-tests PERFORMANCE.md); "
                "the collective or the rank list is wrong. Pass --collective with the benchmark that ran.",
                field="collective")


def parse_hccl_tests(text: str, path: Path, collective: str | None = None, ranks: int | None = None,
                     ranks_per_host: int | None = None) -> list[BenchLog]:
    """The table of an hccl-tests log; ranks from the echoed mpirun line or the arguments."""
    name = _collective_from(text, path, collective)
    if name is None:
        raise WindtunnelError(f"Cannot tell which collective hccl-tests log '{path}' measured: pass --collective "
                              f"({choices_text(COLLECTIVES)}) or name the file after the binary (all_reduce_test...).",
                              field="collective")
    if ranks is None:
        match = _MPIRUN_N_RE.search(text)
        ranks = int(match.group(1)) if match else None
    if ranks_per_host is None:
        match = _NPUS_RE.search(text)
        ranks_per_host = int(match.group(1)) if match else None
    if not ranks or not ranks_per_host:
        raise WindtunnelError(f"hccl-tests log '{path}' does not say how many NPUs ran: it prints no rank list, so "
                              "keep the 'mpirun -n <total> ./bin/..._test -p <per node>' line in the log or pass "
                              "--ranks and --ranks-per-node.", field="ranks")
    if ranks % ranks_per_host:
        raise WindtunnelError(f"hccl-tests log '{path}': {ranks} NPUs do not split evenly into nodes of "
                              f"{ranks_per_host} (fields 'ranks', 'ranks_per_node').", field="ranks")
    factor = bus_factor(name, ranks)
    rows = []
    in_table = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.replace("|", " ").strip()
        if "data_size" in line and ("aveg_time" in line or "avg_time" in line):
            in_table = True
            continue
        tokens = line.split()
        if not in_table or len(tokens) < 3 or not _is_number(tokens[0]):
            continue
        if len(tokens) > 3 and tokens[3].lower() == "failed":
            raise WindtunnelError(f"hccl-tests log '{path}' line {number}: check_result 'failed'; a run that fails "
                                  "its result check cannot be calibrated on.")
        size = _number(tokens[0], path, number, "data_size")
        time_s = _number(tokens[1], path, number, "aveg_time") * US
        algbw = _number(tokens[2], path, number, "alg_bandwidth") * GB
        rows.append(BenchRow(size, time_s, algbw, algbw * factor, False, number))
    if not rows:
        raise WindtunnelError(f"No hccl-tests result table found in '{path}': expected a header with data_size, "
                              "aveg_time and alg_bandwidth followed by numeric rows.")
    hosts = ranks // ranks_per_host
    return [BenchLog(str(path), "hccl-tests", name, ranks, ranks_per_host, hosts, [], rows, None)]


def read_bench_logs(paths: list[Path], collective: str | None = None, ranks: int | None = None,
                    ranks_per_host: int | None = None) -> list[BenchLog]:
    """Parse each file as nccl-tests or hccl-tests output, whichever its table is."""
    from windtunnel.specs.bounds import MAX_DEVICES, check_whole

    if collective is not None and collective.lower().replace("-", "_") not in _BINARIES:
        raise WindtunnelError(f"Collective '{collective}' (field 'collective') is not one of "
                              f"{choices_text(COLLECTIVES)}.", field="collective")
    for name, value in (("ranks", ranks), ("ranks-per-node", ranks_per_host)):
        if value is not None:
            check_whole(name, value, 1, MAX_DEVICES)
    logs = []
    for path in paths:
        text = read_text(Path(path))
        if "data_size" in text and ("aveg_time" in text or "avg_time" in text):
            logs += parse_hccl_tests(text, Path(path), collective, ranks, ranks_per_host)
        elif "busbw" in text:
            logs += parse_nccl_tests(text, Path(path), collective)
        else:
            raise WindtunnelError(f"'{path}' is neither nccl-tests output (a 'size count type ... busbw' table) nor "
                                  "hccl-tests output (a 'data_size aveg_time alg_bandwidth' table).")
    return logs
