"""A local worker pool always stops: a worker that outlives SIGTERM is killed after a bounded wait, so an interrupted
search exits (tests/test_interrupt.py) instead of waiting on Pool.join forever."""

from __future__ import annotations

import signal
import time

from windtunnel.search import backends


def _deaf_worker() -> None:
    """A worker that ignores SIGTERM, as one wedged before its initializer would."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _workers(backend) -> list:
    return list(backend._pool._pool)


def test_terminate_kills_a_worker_that_ignores_sigterm(monkeypatch):
    monkeypatch.setattr(backends, "quiet_worker", _deaf_worker)
    monkeypatch.setattr(backends, "STOP_WAIT_S", 0.5)
    backend = backends.LocalBackend(2)
    assert backend.map(abs, [-1, -2, -3, -4]) == [1, 2, 3, 4]
    workers = _workers(backend)
    start = time.perf_counter()
    backend.terminate()
    assert time.perf_counter() - start < 5.0
    for worker in workers:
        worker.join(5)
        assert worker.exitcode is not None
    assert backend._pool is None


def test_close_lets_idle_workers_exit_and_the_backend_can_map_again():
    backend = backends.LocalBackend(2)
    assert backend.map(abs, [-5, 6, -7]) == [5, 6, 7]
    workers = _workers(backend)
    backend.close()
    assert all(worker.exitcode is not None for worker in workers)
    assert backend.map(abs, [-8, 9]) == [8, 9]  # a fresh pool
    backend.close()
