"""Where the expensive, independent pieces of a search run: local processes (default) or Ray.

A backend maps a picklable top-level function over a list of items and returns the results in the
items' order, so every backend gives the same answer.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from typing import Any

from windtunnel.specs.errors import WindtunnelError


def quiet_worker() -> None:
    """Pool-worker initializer: the parent alone handles Ctrl-C (a worker ignores SIGINT, so the terminal's
    interrupt does not print one traceback per worker), SIGTERM ends a worker silently, and a worker dies with its
    parent (Linux) instead of finishing its chunk and writing into a closed pipe (BrokenPipeError tracebacks)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class LocalBackend:
    """A pool of local processes (all cores by default); runs inline when there is one worker."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._pool = None

    def map(self, function: Callable, items: Sequence[Any]) -> list:
        if self.workers == 1 or len(items) < 2:
            return [function(item) for item in items]
        if self._pool is None:
            self._pool = multiprocessing.get_context("fork").Pool(self.workers, initializer=quiet_worker)
        chunk = max(1, len(items) // (self.workers * 4))
        try:
            return self._pool.map(function, items, chunksize=chunk)
        except BaseException:  # Ctrl-C, SIGTERM, an error in a worker: stop the workers now, not after their chunks
            self.terminate()
            raise

    def terminate(self) -> None:
        """Stop the workers at once (an interrupted search): no join on work that is no longer wanted."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None


def _apply(function: Callable, item: Any) -> Any:
    """Run one item on a Ray worker (a plain function, so any picklable callable can be mapped)."""
    return function(item)


class RayBackend:
    """Tasks on a Ray cluster (``address='auto'`` joins a running one; None starts a local instance)."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError as exc:
            raise WindtunnelError("The Ray backend needs the optional extra: pip install 'windtunnel[ray]' "
                                  "(field 'backend', valid: local, ray).", field="backend") from exc
        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                kwargs["address"] = address
            elif num_cpus:
                kwargs["num_cpus"] = num_cpus
            try:
                ray.init(**kwargs)
            except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
                where = f"at address '{address}'" if address else "on this machine"
                reason = " ".join(str(exc).split())[:300]
                raise WindtunnelError(f"Field 'backend' is 'ray' but no Ray cluster could be joined {where} ({reason}). "
                                      "Start one (`ray start --head`), pass its address with --address HOST:PORT or "
                                      "--address auto (or set RAY_ADDRESS), or use --backend local (valid: local, ray).",
                                      field="backend") from None
            self._started = True
        self._apply = ray.remote(_apply)

    def map(self, function: Callable, items: Sequence[Any]) -> list:
        if not items:
            return []
        shared = self._ray.put(function)  # ship the (possibly large) callable once
        return self._ray.get([self._apply.remote(shared, item) for item in items])

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False


def make_backend(name: str, *, address: str | None = None, workers: int | None = None):
    """A backend by name: 'local' or 'ray'."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 4096):
        raise WindtunnelError(f"Field 'workers' is {workers!r}; give a number of processes from 1 to 4,096 (or "
                              "leave it out: all cores).", field="workers")
    name = str(name).strip().lower()
    if name == "local":
        return LocalBackend(workers)
    if name == "ray":
        return RayBackend(address, num_cpus=workers)
    raise WindtunnelError(f"Unknown backend '{name}' (field 'backend'); valid: local, ray.", field="backend")
