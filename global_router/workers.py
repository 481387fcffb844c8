"""The main router's side of `--workers N`: it starts and supervises N-1 router worker processes.

Each worker (`worker_process.py`, the child's entry point) reads the router's config from a private
temp file written here; apart from the parent's side so that `router.py` starts workers without
importing the module that imports `router.py`.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path

import msgspec

from common.config.router import GlobalRouterConfig
from common.worker_processes import WorkerProcesses


class RouterWorkers(WorkerProcesses):
    """The main router's workers; each reads the router's config from a private temp file."""

    def __init__(self, cfg: GlobalRouterConfig, count: int, port: int) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="fleetgate-router-workers-")
        self._config = Path(self._dir.name) / "router.json"  # 0600 in a 0700 directory
        self._config.write_bytes(msgspec.json.encode(cfg))
        self.port = port
        super().__init__("router", count, self._command)

    def _command(self, worker: int) -> list[str]:
        level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
        return [
            sys.executable, "-m", "global_router.worker_process", "--config", str(self._config),
            "--worker", str(worker), "--port", str(self.port), "--log-level", level,
        ]  # fmt: skip

    async def stop(self, grace_s: float = 8.0) -> None:
        await super().stop(grace_s)
        self._dir.cleanup()
