"""One helper for every hot swap: a daemon thread that calls `refresh` every `serve.poll_interval_s`.

The Retriever follows the index catalog, the Reranker and the Generator follow promotions of a `catalog:NAME`
model, the LLM application pins a newly promoted version. Each `refresh` loads what is new and swaps it in with one
reference assignment (or asks Serve to roll over); a failure leaves what is served in place and is retried at the
next poll.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from app.errors import Unavailable

log = logging.getLogger("ray.serve")


class Watcher:
    def __init__(self, name: str, refresh: Callable[[], object], interval_s: float, serving: Callable[[], object]):
        """`name`: what is followed (the thread's name, the log's words); `serving`: what is served now (logged
        when a refresh fails)."""
        self.name, self.refresh, self.interval_s, self.serving = name, refresh, interval_s, serving
        self._stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            try:
                self.refresh()
            except Exception:  # a damaged or half-copied version, storage briefly unreachable: retry later
                log.exception("could not follow %s; still serving %s", self.name, self.serving())

    def check(self) -> None:
        """Raises if the thread has ended unstopped (a BaseException escaped `refresh`): the replica would serve
        what it has forever. Part of a deployment's `check_health`."""
        if not self.thread.is_alive() and not self._stopped.is_set():
            raise Unavailable(f"the thread following {self.name} has stopped: still serving {self.serving()}")

    def stop(self) -> None:
        self._stopped.set()
