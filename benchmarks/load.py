"""Closed-loop load for the serving benchmarks: `clients` concurrent loops share `requests` calls, each loop asking
again as soon as its answer is in."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


async def closed_loop(call: Callable[[int], Awaitable[T]], clients: int, requests: int) -> tuple[list[T], float]:
    """Each call's result, and the seconds all took."""
    done: list[T] = []
    todo = iter(range(requests))

    async def client() -> None:
        for i in todo:
            done.append(await call(i))

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return done, time.perf_counter() - t0
