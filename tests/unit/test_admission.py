"""Admission of generations (app/rag/admission.py): what is admitted, refused and measured, on a fake clock."""

import pytest

from app.errors import Overloaded
from app.rag.admission import WINDOW_S, Admission


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def admission(clock: Clock, **kw) -> Admission:
    return Admission(**{"budget_s": 60.0, "floor": 4, "max_running": 64, "lifetime_s": 125.0, "clock": clock,
                        **kw})


def test_before_any_answer_only_the_floor_is_admitted_and_a_lone_request_always_is():
    clock = Clock()
    a = admission(clock)
    tickets = [a.admit(64) for _ in range(4)]
    with pytest.raises(Overloaded, match="not measured yet"):
        a.admit(64)
    assert a.rate() is None and a.state().running == 4
    for t in tickets:
        t.release()  # failed answers measure nothing
    assert a.rate() is None and a.state().running == 0
    slow = admission(clock, budget_s=1.0)
    t = slow.admit(100)
    clock.now += 100
    t.finish(100)  # 1 token/s
    tickets = [slow.admit(8000) for _ in range(4)]  # the floor: admitted whatever the prediction
    with pytest.raises(Overloaded, match="would need"):
        slow.admit(1)
    assert len(tickets) == 4


def test_the_measured_rate_bounds_the_work_admitted_to_the_budget():
    clock = Clock()
    a = admission(clock, budget_s=10.0)
    first = [a.admit(100) for _ in range(4)]
    clock.now += 10  # four answers of 100 tokens in 10 s of generating: 40 tokens/s
    for t in first:
        t.finish(100)
    assert a.rate() == pytest.approx(40.0) and a.share == pytest.approx(1.0)
    # 10 s at 40 tokens/s is 400 tokens: four answers of 100 fit, a fifth is refused at once with the reason
    running = [a.admit(100) for _ in range(4)]
    with pytest.raises(Overloaded, match=r"would need 12 s .* \(40\.0 tokens/s\)"):
        a.admit(100)
    running[0].finish(100)
    a.admit(100)  # one finished: room again


def test_short_answers_let_more_in_and_the_hard_bound_holds():
    clock = Clock()
    a = admission(clock, budget_s=10.0, max_running=6)
    for _ in range(20):  # answers that stop at a fifth of their limit (a stop string), 20 tokens/s
        t = a.admit(100)
        clock.now += 1
        t.finish(20)
    assert a.share == pytest.approx(0.2, abs=0.02)
    tickets = [a.admit(100) for _ in range(6)]  # 6 × ~20 expected tokens = 120 ≤ 10 s × 20 tokens/s
    with pytest.raises(Overloaded, match="the most this replica admits"):
        a.admit(100)
    assert len(tickets) == 6


def test_the_rate_forgets_what_is_older_than_its_window_and_idle_time_does_not_count():
    clock = Clock()
    a = admission(clock)
    t = a.admit(50)
    clock.now += 5
    t.finish(50)
    clock.now += 1000  # idle: the busy clock stands still, the rate is still the last one measured
    assert a.rate() == pytest.approx(10.0)
    t = a.admit(50)
    clock.now += WINDOW_S + 1
    assert a.rate() is None  # the only answer is out of the window, busy time moved on
    t.finish(31)
    assert a.rate() == pytest.approx(31 / WINDOW_S)


def test_a_ticket_never_given_back_lapses_after_the_request_lifetime():
    clock = Clock()
    a = admission(clock, floor=1)
    a.admit(64)  # a stream whose client left before it started: nobody closes it
    with pytest.raises(Overloaded):
        a.admit(64)
    clock.now += 126
    late = a.admit(64)
    assert a.state().running == 1
    late.finish(10)
    late.release()  # closing twice is harmless
    assert a.state().running == 0
