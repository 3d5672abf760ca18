"""deployments.watch.Watcher: the hot-swap thread, and the check a deployment's check_health makes of it."""

from __future__ import annotations

import threading

import pytest

from app.errors import Unavailable
from deployments.watch import Watcher

pytestmark = pytest.mark.unit


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the planted death
def test_a_failing_refresh_is_retried_and_a_dead_thread_fails_the_check() -> None:
    calls: list[int] = []
    died = threading.Event()

    def refresh() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("storage briefly unreachable")  # logged, retried at the next poll
        if len(calls) == 3:
            died.set()
            raise SystemExit  # escapes the thread's except Exception: the thread ends

    watcher = Watcher("a test", refresh, 0.01, lambda: "v1")
    assert died.wait(5)
    watcher.thread.join(5)
    with pytest.raises(Unavailable, match="following a test has stopped: still serving v1"):
        watcher.check()

    stopped = Watcher("another", lambda: None, 0.01, lambda: "v1")
    stopped.stop()
    stopped.thread.join(5)
    stopped.check()  # stopped on purpose (the replica is going): not a fault
