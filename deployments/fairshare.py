"""Fair share between API keys in one Ingress replica: while more than one key is active, each key runs at most
`slots` requests at once and the rest wait in that key's own line (first come, first served); a key alone is not
limited. So a client that floods the API (however cheap or costly its requests) queues behind itself, and other
keys' requests find the graph as busy as `slots` requests of the flooder make it, not as busy as the flood would.

"Active" lingers `linger_s` after a key's last request ended: a client that sends one request after another is
between requests for a few milliseconds at a time, and must not lose its share in each of those gaps.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


class LineFull(Exception):
    """The key already has as many requests waiting as a line holds."""


@dataclass
class _Key:
    running: int = 0
    waiting: deque[asyncio.Future[None]] = field(default_factory=deque)
    last_seen: float = float("-inf")  # monotonic seconds when a request of this key last ended


class FairShare:
    def __init__(self, slots: int, max_waiting: int, linger_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        assert slots >= 1 and max_waiting >= 0
        self.slots, self.max_waiting, self.linger_s, self.clock = slots, max_waiting, linger_s, clock
        self.keys: dict[bytes, _Key] = {}

    def _active(self, k: _Key, now: float) -> bool:
        return bool(k.running or k.waiting) or now - k.last_seen < self.linger_s

    def _limit(self, k: _Key, active: int, now: float) -> float:
        """`k`'s limit when `active` keys (`k` among them or not) are active."""
        contested = active - self._active(k, now) > 0
        return self.slots if contested else float("inf")

    def _count_active(self, now: float) -> int:
        return sum(self._active(k, now) for k in self.keys.values())

    async def acquire(self, key: bytes) -> None:
        """Wait for a slot of `key`'s share; raises LineFull when its line is full. Pair with `release`."""
        k = self.keys.setdefault(key, _Key())
        now = self.clock()
        if not k.waiting and k.running < self._limit(k, self._count_active(now), now):
            k.running += 1
            return
        if len(k.waiting) >= self.max_waiting:
            raise LineFull
        turn = asyncio.get_running_loop().create_future()
        k.waiting.append(turn)
        try:
            await turn  # `_admit` counts the slot as ours before it wakes us
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.release(key)  # admitted and cancelled in the same instant: hand the slot on
            else:
                k.waiting.remove(turn)
            raise

    def release(self, key: bytes) -> None:
        k = self.keys[key]
        assert k.running > 0
        k.running -= 1
        k.last_seen = self.clock()
        self._admit()
        self._forget()

    def release_later(self, key: bytes, delay_s: float) -> None:
        """`release` after `delay_s` seconds on the running loop; the slot stays taken until then."""
        asyncio.get_running_loop().call_later(delay_s, self.release, key)

    def _admit(self) -> None:
        # A release can raise any key's limit (its own line moves; a key going idle lifts the others' limit).
        now = self.clock()
        active = self._count_active(now)
        for k in self.keys.values():
            while k.waiting and k.running < self._limit(k, active, now):
                k.running += 1
                k.waiting.popleft().set_result(None)

    def _forget(self) -> None:
        # Keys idle past the linger hold no state: the table stays as small as the set of active clients.
        now = self.clock()
        for key in [key for key, k in self.keys.items() if not self._active(k, now)]:
            del self.keys[key]
