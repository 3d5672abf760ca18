"""An HTTP server a benchmark runs in a process of its own (`vllm serve`, a peer's FastAPI app): started in its own
process group, waited for until its health route answers, stopped with everything it spawned."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx


class ServerProcess:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path, health_url: str,
                 timeout_s: float):
        """Starts `argv` (its output appended to `log`) and returns once GET `health_url` answers 200; raises if the
        process exits first or `timeout_s` passes."""
        self.log = open(log, "ab")  # noqa: SIM115  # closed by stop()
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        deadline = time.time() + timeout_s
        while True:
            assert self.proc.poll() is None, f"{name} exited {self.proc.returncode}: see {log}"
            assert time.time() < deadline, f"{name} not up in {timeout_s:.0f} s: see {log}"
            try:
                if httpx.get(health_url, timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(1)

    def stop(self, timeout_s: float = 120) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout_s)
        self.log.close()
