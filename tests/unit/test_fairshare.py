"""Fair share between API keys (`deployments/fairshare.py`) and the Guard's use of it: a key alone is not limited,
contested keys run `slots` requests each and queue the rest in order, a full line is 429, a cancelled waiter
leaves the line."""

import asyncio

import pytest

from app import apikeys
from deployments.fairshare import FairShare, LineFull
from deployments.guard import Guard

A, B = b"a", b"b"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def started(share: FairShare, key: bytes) -> asyncio.Task[None]:
    task = asyncio.create_task(share.acquire(key))
    await asyncio.sleep(0)  # let it take a slot or join the line
    return task


def test_a_key_alone_is_not_limited():
    async def run() -> None:
        share = FairShare(slots=1, max_waiting=0)
        for _ in range(10):
            await asyncio.wait_for(share.acquire(B), 1)
        assert share.keys[B].running == 10

    asyncio.run(run())


def test_contested_keys_run_their_share_and_queue_the_rest_in_order():
    async def run() -> None:
        clock = Clock()
        share = FairShare(slots=2, max_waiting=8, linger_s=1.0, clock=clock)
        await share.acquire(A)
        held = [await started(share, B) for _ in range(2)]
        waiting = [await started(share, B) for _ in range(3)]
        assert all(t.done() for t in held) and not any(t.done() for t in waiting)
        await asyncio.wait_for(share.acquire(A), 1)  # A's second request does not wait behind B's line
        share.release(B)
        await asyncio.sleep(0)
        assert [t.done() for t in waiting] == [True, False, False]  # first come, first served
        share.release(A)
        share.release(A)
        share.release(B)
        await asyncio.sleep(0)
        assert [t.done() for t in waiting] == [True, True, False]  # A lingers: B keeps to its share
        clock.now += 1.5
        share.release(B)
        await asyncio.sleep(0)
        assert waiting[2].done() and A not in share.keys  # A idle past the linger: B alone, and A forgotten

    asyncio.run(run())


def test_a_full_line_is_refused_and_a_cancelled_waiter_leaves_it():
    async def run() -> None:
        share = FairShare(slots=1, max_waiting=1)
        await share.acquire(A)
        await share.acquire(B)
        waiter = await started(share, B)
        with pytest.raises(LineFull):
            await share.acquire(B)
        waiter.cancel()
        await asyncio.sleep(0)
        assert waiter.cancelled() and not share.keys[B].waiting
        nxt = await started(share, B)  # the line has room again
        share.release(B)
        await asyncio.sleep(0)
        assert nxt.done() and share.keys[B].running == 1

    asyncio.run(run())


def test_the_guard_holds_a_slot_until_the_response_ends_and_answers_429_when_the_line_is_full():
    keys = ["first-key-0123456789", "second-key-0123456789"]
    gate = asyncio.Event()
    served: list[str] = []

    async def app(scope, receive, send) -> None:  # a response that ends when the gate opens
        served.append(scope["path"])
        await gate.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    guard = Guard(app, apikeys.KeyRing.of(keys), 65_536, FairShare(slots=1, max_waiting=1), retry_after_s=3)

    async def get(key: str) -> tuple[int, dict[bytes, bytes], bytes]:
        messages: list[dict] = []

        async def receive() -> dict:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict) -> None:
            messages.append(message)

        scope = {"type": "http", "method": "GET", "path": f"/v1/{key[:5]}", "headers":
                 [(b"authorization", f"Bearer {key}".encode())]}
        await guard(scope, receive, send)
        return messages[0]["status"], dict(messages[0]["headers"]), messages[-1]["body"]

    async def run() -> None:
        tasks = [asyncio.create_task(get(k)) for k in (keys[0], keys[1], keys[1], keys[1])]
        await asyncio.sleep(0.05)
        assert served == ["/v1/first", "/v1/secon"]  # one each; key 2's next waits in its line
        status, headers, body = await asyncio.wait_for(tasks[3], 1)
        assert status == 429 and headers[b"retry-after"] == b"3" and b"rate_limited" in body
        gate.set()
        assert [(await t)[0] for t in tasks[:3]] == [200, 200, 200]
        assert len(served) == 3 and all(k.running == 0 for k in guard.share.keys.values())

    asyncio.run(run())


def test_a_refused_request_answers_at_once_but_holds_its_keys_slot_a_while():
    keys = ["first-key-0123456789", "second-key-0123456789"]
    gate = asyncio.Event()

    async def app(scope, receive, send) -> None:  # /v1/slow ends when the gate opens; /v1/bad is refused
        if scope["path"] == "/v1/slow":
            await gate.wait()
        status = 422 if scope["path"] == "/v1/bad" else 200
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    guard = Guard(app, apikeys.KeyRing.of(keys), 65_536, FairShare(slots=1, max_waiting=4), retry_after_s=1,
                  refusal_hold_s=0.3)

    async def call(key: str, path: str) -> tuple[int, float]:
        statuses: list[int] = []

        async def receive() -> dict:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        t0 = asyncio.get_running_loop().time()
        await guard({"type": "http", "method": "GET", "path": path,
                     "headers": [(b"authorization", f"Bearer {key}".encode())]}, receive, send)
        return statuses[0], asyncio.get_running_loop().time() - t0

    async def run() -> None:
        slow = asyncio.create_task(call(keys[0], "/v1/slow"))  # the first key is active: the keys contend
        await asyncio.sleep(0.01)
        status, took = await call(keys[1], "/v1/bad")
        assert status == 422 and took < 0.1  # the refusal itself is not delayed
        status, took = await call(keys[1], "/v1/ok")
        assert status == 200 and 0.2 < took < 1.0  # the next waits for the held slot
        status, took = await call(keys[1], "/v1/ok")
        assert status == 200 and took < 0.1  # a served request hands its slot back at once
        gate.set()
        assert (await slow)[0] == 200
        await asyncio.sleep(0.35)
        assert all(k.running == 0 for k in guard.share.keys.values())

    asyncio.run(run())
