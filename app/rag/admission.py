"""Admission of generations: answer what can finish within the deadline, refuse the rest at once.

Without it a burst past the generator's capacity is queued whole: with continuous batching every admitted sequence
slows every other, and on a slow CPU (an AVX2 VM: 29 tokens/s at 32 clients) all 32 requests of a burst were still
running when their 120 s deadline passed, so none was answered. Serve's queue bounds (`max_queued_requests`) count
requests, which says nothing about how long they take on this machine.

So the Ingress measures what the generator delivers (completion tokens per second while it has work: its throughput
at the load it has) and admits a generation only if the tokens expected of everything admitted, this one included,
can be generated within `budget_s` at that rate. Expected tokens are each request's token limit scaled by the share
of their limit that recent answers used (stop strings end most answers early). Little's law, in tokens. `floor`
generations are admitted whatever the prediction (and before any rate is measured): the rate is measured at the
concurrency admitted, and continuous batching generates more tokens/s with more sequences, so admitting by the rate
of one sequence alone would keep admitting one (seen: one of 48 answered where four fit the same budget).

A refused request gets 503 + Retry-After within microseconds, before any stage runs, streamed or not.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel

from app.errors import Overloaded

WINDOW_S = 30.0  # seconds of generating time the rate is measured over
SHARE_WEIGHT = 0.2  # weight of each new answer in the running mean of the share of its token limit it used


class AdmissionState(BaseModel):
    """What /readyz says of admission."""

    running: int  # generations admitted and not finished
    tokens_per_s: float | None  # the measured rate; None before any is measured
    share_of_max_tokens: float  # of their token limit, what recent answers used
    budget_s: float


@dataclass
class Ticket:
    """One admitted generation: hold it until the answer ends, then `finish(tokens)` (or `release()` if it failed).
    A ticket never closed (a stream whose client left before it started) lapses at `expires`."""

    admission: Admission
    max_tokens: int
    expires: float
    open: bool = True

    def finish(self, completion_tokens: int) -> None:
        if self.open:
            self.open = False
            self.admission._done(self, completion_tokens)

    def release(self) -> None:
        if self.open:
            self.open = False
            self.admission._done(self, None)


@dataclass
class Admission:
    budget_s: float  # predicted time for admitted work above which a new generation is refused (seconds)
    floor: int  # generations always admitted at once, whatever the measured rate
    max_running: int  # hard bound on admitted generations, whatever the rate
    lifetime_s: float  # longest a generation can run (the request deadline): a ticket older than this has lapsed
    clock: Callable[[], float] = time.monotonic
    running: list[Ticket] = field(default_factory=list)
    share: float = 1.0  # running mean of completion tokens / max tokens
    _busy_s: float = 0.0  # seconds during which at least one generation was admitted
    _since: float = 0.0  # when _busy_s was last brought up to date
    _done_at: deque[tuple[float, int]] = field(default_factory=deque)  # (busy clock, completion tokens)

    def _tick(self) -> float:
        """The busy clock, brought up to date: it runs only while something is admitted."""
        now = self.clock()
        if self.running:
            self._busy_s += now - self._since
        self._since = now
        for lapsed in [t for t in self.running if t.expires < now]:
            lapsed.open = False
            self.running.remove(lapsed)
        return self._busy_s

    def rate(self) -> float | None:
        """Completion tokens per second of generating over the last WINDOW_S; None before any answer."""
        busy = self._tick()
        while self._done_at and self._done_at[0][0] < busy - WINDOW_S:
            self._done_at.popleft()
        if not self._done_at:
            return None
        span = min(WINDOW_S, busy)
        return sum(tokens for _, tokens in self._done_at) / span if span > 0 else None

    def expected(self, max_tokens: int) -> float:
        return max(1.0, self.share * max_tokens)

    def admit(self, max_tokens: int) -> Ticket:
        """A ticket for a generation of at most `max_tokens`, or Overloaded (503) when it would not finish in time."""
        assert max_tokens >= 1
        rate = self.rate()
        if len(self.running) >= self.max_running:
            raise Overloaded(f"{len(self.running)} answers are being generated, the most this replica admits; "
                             "retry later")
        if len(self.running) >= self.floor:
            if rate is None:
                raise Overloaded(f"the generator's speed is not measured yet and {len(self.running)} answers are "
                                 "being generated; retry later")
            work = sum(self.expected(t.max_tokens) for t in self.running) + self.expected(max_tokens)
            if work / rate > self.budget_s:
                raise Overloaded(f"the generator would need {work / rate:.0f} s for the answers admitted with this "
                                 f"one ({rate:.1f} tokens/s), over its {self.budget_s:.0f} s; retry later")
        ticket = Ticket(self, max_tokens, self.clock() + self.lifetime_s)
        self.running.append(ticket)
        return ticket

    def _done(self, ticket: Ticket, completion_tokens: int | None) -> None:
        busy = self._tick()
        if ticket in self.running:  # else it lapsed
            self.running.remove(ticket)
        if completion_tokens is not None:
            self._done_at.append((busy, completion_tokens))
            used = min(1.0, completion_tokens / ticket.max_tokens)
            self.share += SHARE_WEIGHT * (used - self.share)

    def state(self) -> AdmissionState:
        """For /readyz: what runs, the measured rate and how much of their token limit answers use."""
        rate = self.rate()
        return AdmissionState(running=len(self.running), tokens_per_s=None if rate is None else round(rate, 1),
                              share_of_max_tokens=round(self.share, 2), budget_s=self.budget_s)
