"""Batching concurrent requests into one model call, formed when the model is free.

Ray Serve's `@serve.batch` (Ray 2.60) forms a batch as soon as its wait is over and only then waits for the
previous batch to finish (its batch loop runs ahead of the `max_concurrent_batches` semaphore, since
ray-project/ray#53096): at `batch_wait_timeout_s=0` nearly every batch holds one request however many are waiting
(measured in the Retriever at 32 clients: 252 of 270 batches held one question), and a wait long enough to fill
batches is added to every lone request. A `Batcher` takes the waiting items when the model is free instead: a lone
request waits for nothing, and the requests that arrive while one batch computes form the next.

The same batching joins concurrent requests' calls to another deployment into one (the Ingress's retrievals): a
Serve call costs its caller and its callee about half a millisecond of CPU each, whatever it carries. `paced`
does it for one streamed answer's chunks (the LLM replica's).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from app.errors import Unavailable

In = TypeVar("In")
Out = TypeVar("Out")


@dataclass
class _Waiting(Generic[In, Out]):
    item: In
    future: asyncio.Future[Out]


class Batcher(Generic[In, Out]):
    """`await batcher(item)` → `fn([..., item, ...])`'s result for that item. `fn` takes at most `max_batch_size`
    items and returns one result per item, in order: a blocking function (a model call) runs in a thread, a coroutine
    function (a call to another deployment) on the loop. At most `max_concurrent` batches run at once, and a batch is
    formed only when one may run, so the items that arrive meanwhile form the next. `wait_s`: how long a batch that is
    not full waits for more items before it runs (0: none). An exception from `fn` is raised to every caller in that
    batch, so `fn` raises only for what fails them all."""

    def __init__(self, fn: Callable[[list[In]], Sequence[Out] | Awaitable[Sequence[Out]]], max_batch_size: int,
                 wait_s: float = 0.0, max_concurrent: int = 1):
        assert max_batch_size >= 1 and wait_s >= 0 and max_concurrent >= 1
        self.fn, self.max_batch_size, self.wait_s = fn, max_batch_size, wait_s
        self.max_concurrent = max_concurrent
        self.queue: asyncio.Queue[_Waiting[In, Out]] | None = None  # made on the first call, in the caller's loop
        self.tasks: set[asyncio.Task[None]] = set()  # the batch loop and the batches running (held: a task nobody
        # holds can be collected)
        self.loop: asyncio.Task[None] | None = None

    async def __call__(self, item: In) -> Out:
        if self.queue is None:
            self.queue = asyncio.Queue()
            # a fresh context: the loop must not carry the first caller's request id (Serve's logs) into others
            self.loop = asyncio.create_task(self._run(self.queue), context=contextvars.Context())
            self.tasks.add(self.loop)
        waiting = _Waiting(item, asyncio.get_running_loop().create_future())
        self.queue.put_nowait(waiting)
        return await waiting.future  # cancelling the caller cancels the future: its batch skips it

    def check(self) -> None:
        """Raises if the batch loop has ended (it never returns: it failed), since every later caller would wait
        forever: part of a deployment's `check_health`, so Serve replaces such a replica."""
        if self.loop is not None and self.loop.done():
            raise Unavailable(f"the batch loop of {getattr(self.fn, '__name__', self.fn)} has stopped: "
                              f"{self.loop.exception() if not self.loop.cancelled() else 'cancelled'}")

    async def _next_batch(self, queue: asyncio.Queue[_Waiting[In, Out]]) -> list[_Waiting[In, Out]]:
        batch = [await queue.get()]
        deadline = asyncio.get_running_loop().time() + self.wait_s
        while len(batch) < self.max_batch_size:
            if not queue.empty():
                batch.append(queue.get_nowait())
                continue
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(queue.get(), left))
            except TimeoutError:
                break
        return [w for w in batch if not w.future.done()]  # callers cancelled while waiting are left out

    async def _run(self, queue: asyncio.Queue[_Waiting[In, Out]]) -> None:
        free = asyncio.Semaphore(self.max_concurrent)
        while True:
            await free.acquire()  # before the batch is formed: what arrives while every slot is busy joins it
            batch = await self._next_batch(queue)
            task = asyncio.create_task(self._compute(batch))
            self.tasks.add(task)

            def done(t: asyncio.Task[None]) -> None:
                self.tasks.discard(t)
                free.release()

            task.add_done_callback(done)

    async def _compute(self, batch: list[_Waiting[In, Out]]) -> None:
        if not batch:
            return
        items = [w.item for w in batch]
        try:
            if inspect.iscoroutinefunction(self.fn):
                results = await self.fn(items)
            else:
                results = await asyncio.to_thread(self.fn, items)
            assert len(results) == len(batch), f"{len(results)} results for a batch of {len(batch)}"
        except Exception as e:  # every caller of this batch gets the error; the loop goes on
            for w in batch:
                if not w.future.done():
                    w.future.set_exception(e)
            return
        for w, result in zip(batch, results, strict=True):
            if not w.future.done():
                w.future.set_result(result)


T = TypeVar("T")


async def paced(items: AsyncIterator[T], interval_s: float) -> AsyncGenerator[list[T]]:
    """A stream's items in lists, at most one list per `interval_s`: an item that arrives after a quiet interval is
    sent at once, and the items that arrive within an interval of the last list go together in the next. Ray Serve
    LLM's response batcher sends what arrived at every tick counted from the request's start instead, so a first
    token made 100 ms in waits for the 150 ms tick (of 50 ms), and every answer's time to first token grows by up to
    one interval. Closing the lists early cancels the read of `items` (vLLM then aborts the sequence), as Ray's
    does; an error from `items` is raised after the items before it."""
    loop = asyncio.get_running_loop()
    pending: list[T] = []
    arrived = asyncio.Event()  # an item, or the end of `items`

    async def read() -> None:
        try:
            async for item in items:
                pending.append(item)
                arrived.set()
        finally:
            arrived.set()

    reader = asyncio.create_task(read())
    sent_at = -float("inf")
    try:
        while True:
            await arrived.wait()
            if (wait_s := sent_at + interval_s - loop.time()) > 0:
                await asyncio.wait({reader}, timeout=wait_s)  # the end of `items` cuts the wait short
            arrived.clear()
            batch, pending[:] = pending[:], []
            if batch:
                sent_at = loop.time()
                yield batch
            if reader.done() and not pending:
                reader.result()  # its error, if it failed
                return
    finally:
        reader.cancel()
