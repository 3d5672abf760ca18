"""deployments.batching.Batcher: batches formed when the model is free (pure asyncio, no Ray)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

import pytest

from deployments.batching import Batcher, paced

pytestmark = pytest.mark.unit


class Model:
    """Doubles numbers, taking `seconds` per call; records every batch it was given."""

    def __init__(self, seconds: float = 0.02, fail_on: int | None = None):
        self.seconds, self.fail_on = seconds, fail_on
        self.batches: list[list[int]] = []
        self.running = threading.Lock()

    def __call__(self, items: list[int]) -> list[int]:
        assert self.running.acquire(blocking=False), "two batches ran at once"
        try:
            self.batches.append(items)
            time.sleep(self.seconds)
            if self.fail_on in items:
                raise ValueError(f"cannot take {self.fail_on}")
            return [2 * i for i in items]
        finally:
            self.running.release()


def test_a_lone_call_runs_at_once_and_concurrent_calls_share_batches() -> None:
    model = Model()
    batcher = Batcher(model, max_batch_size=8)

    async def main() -> tuple[int, float, list[int]]:
        t0 = time.perf_counter()
        lone = await batcher(21)
        lone_s = time.perf_counter() - t0
        first = asyncio.create_task(batcher(0))
        await asyncio.sleep(0.005)  # 0 is computing when the other 19 arrive
        return lone, lone_s, [await first, *await asyncio.gather(*(batcher(i) for i in range(1, 20)))]

    lone, lone_s, results = asyncio.run(main())
    assert lone == 42 and lone_s < 0.1  # the model's 20 ms, and no wait for company
    assert results == [2 * i for i in range(20)]  # each caller gets its own item's result
    # 0 ran alone (nothing else waited yet); the 19 that queued while it computed fill batches of 8
    assert model.batches[1:] == [[0], list(range(1, 9)), list(range(9, 17)), [17, 18, 19]], model.batches


def test_a_wait_fills_a_batch_from_callers_that_come_later() -> None:
    model = Model(seconds=0)
    batcher = Batcher(model, max_batch_size=4, wait_s=0.05)

    async def main() -> list[int]:
        async def later(i: int) -> int:
            await asyncio.sleep(0.01 * i)
            return await batcher(i)

        return await asyncio.gather(*(later(i) for i in range(4)))

    assert asyncio.run(main()) == [0, 2, 4, 6]
    assert model.batches == [[0, 1, 2, 3]]  # full before the wait ran out: run at once


def test_an_error_reaches_every_caller_of_its_batch_and_the_batcher_goes_on() -> None:
    model = Model(fail_on=3)
    batcher = Batcher(model, max_batch_size=8)

    async def main() -> tuple[list[int | BaseException], int]:
        results = await asyncio.gather(*(batcher(i) for i in range(6)), return_exceptions=True)
        return results, await batcher(5)

    results, after = asyncio.run(main())
    assert model.batches[0] == list(range(6))  # all six queued before the first batch formed
    assert all(isinstance(r, ValueError) and "cannot take 3" in str(r) for r in results), results
    assert after == 10


def test_a_cancelled_caller_is_left_out_of_the_next_batch() -> None:
    model = Model()
    batcher = Batcher(model, max_batch_size=8)

    async def main() -> list[int]:
        first = asyncio.create_task(batcher(0))
        await asyncio.sleep(0.005)  # 0 is computing; 1 and 2 wait for the next batch
        gone, stays = asyncio.create_task(batcher(1)), asyncio.create_task(batcher(2))
        await asyncio.sleep(0)
        gone.cancel()
        return [await first, await stays]

    assert asyncio.run(main()) == [0, 4]
    assert model.batches == [[0], [2]]


def test_a_coroutine_function_runs_on_the_loop_with_at_most_max_concurrent_batches() -> None:
    """As the Ingress calls the Retriever: two calls in flight; what arrives meanwhile waits and forms the next."""
    running, most, batches = 0, 0, []

    async def call(items: list[int]) -> list[int]:
        nonlocal running, most
        running += 1
        most = max(most, running)
        batches.append(items)
        await asyncio.sleep(0.02)
        running -= 1
        return [2 * i for i in items]

    batcher = Batcher(call, max_batch_size=8, max_concurrent=2)

    async def main() -> list[int]:
        first = [asyncio.create_task(batcher(i)) for i in (0, 1)]
        await asyncio.sleep(0.005)  # 0 and 1 went as one call, one slot left: 2 goes alone at once
        second = asyncio.create_task(batcher(2))
        await asyncio.sleep(0.005)  # both slots busy: 3-12 wait for the first call to return
        rest = [batcher(i) for i in range(3, 13)]
        return [*await asyncio.gather(*first), await second, *await asyncio.gather(*rest)]

    assert asyncio.run(main()) == [2 * i for i in range(13)]
    assert most == 2
    assert batches == [[0, 1], [2], list(range(3, 11)), [11, 12]], batches


def test_check_fails_once_the_batch_loop_has_died() -> None:
    """A deployment's check_health calls check(): a loop that died would leave every later caller waiting."""
    from app.errors import Unavailable

    batcher = Batcher(Model(), max_batch_size=4)

    async def main() -> None:
        batcher.check()  # no loop yet: nothing to check
        assert await batcher(1) == 2
        batcher.check()
        assert batcher.loop is not None
        batcher.loop.cancel()
        await asyncio.sleep(0)
        with pytest.raises(Unavailable, match="batch loop .* has stopped"):
            batcher.check()

    asyncio.run(main())


async def arriving(gaps_s: list[float], fail: bool = False, made: list[float] | None = None):
    """Items 0, 1, ... each after its gap (seconds), their times appended to `made`; then an error if `fail`."""
    for i, gap in enumerate(gaps_s):
        await asyncio.sleep(gap)
        if made is not None:
            made.append(time.perf_counter())
        yield i
    if fail:
        raise ValueError("the engine died")


async def paced_lists(gaps_s: list[float], interval_s: float, fail: bool = False,
                      made: list[float] | None = None) -> list[tuple[float, list[int]]]:
    """(when it was received, perf_counter s; the list) for each list `paced` sends."""
    out = []
    async for batch in paced(arriving(gaps_s, fail, made), interval_s):
        out.append((time.perf_counter(), batch))
    return out


def test_paced_sends_the_first_item_at_once_and_then_one_list_per_interval():
    # a first token 0.1 s in, then one every 10 ms: Ray's 50 ms ticks would hold the first until 0.15 s
    made: list[float] = []
    sent = asyncio.run(paced_lists([0.1] + [0.01] * 20, 0.05, made=made))
    (first_at, first), *rest = sent
    assert first == [0] and first_at - made[0] < 0.025  # sent when made, not at a tick
    assert [i for _, batch in sent for i in batch] == list(range(21))  # all of them, in order, once
    # one list per interval (asyncio's timers may fire a clock tick early), but the end is sent when it comes
    assert all(b - a >= 0.045 for (a, _), (b, _) in itertools.pairwise(sent[:-1]))
    assert len(sent) <= 1 + 0.2 / 0.05 + 1 and any(len(batch) > 1 for _, batch in rest)


def test_paced_with_no_interval_sends_each_item_as_it_comes_and_raises_the_streams_error_after_its_items():
    assert [batch for _, batch in asyncio.run(paced_lists([0.01] * 3, 0))] == [[0], [1], [2]]
    with pytest.raises(ValueError, match="the engine died"):
        asyncio.run(paced_lists([0.0, 0.0], 0.05, fail=True))


def test_closing_paced_early_cancels_the_read_of_the_stream():
    cancelled = asyncio.Event()

    async def endless():
        try:
            while True:
                await asyncio.sleep(0.01)
                yield 1
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def take_one() -> None:
        stream = paced(endless(), 0.05)
        assert await anext(stream) == [1]
        await stream.aclose()
        await asyncio.wait_for(cancelled.wait(), 1)

    asyncio.run(take_one())
