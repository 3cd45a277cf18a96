"""ftgateway.admission: slots, the wait for one, refusals and fairness between keys (in one event
loop, no server)."""

from __future__ import annotations

import asyncio

import pytest

from ftgateway.admission import Admission
from ftgateway.errors import ApiError


def run(coroutine):
    return asyncio.run(coroutine)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_without_a_bound_every_request_goes_through():
    async def main():
        admission = Admission(0, 0.01, 0)
        for _ in range(100):
            await admission.take("a")
        return admission.taken

    assert run(main()) == 0


def test_requests_within_the_slots_go_at_once_and_the_next_waits_for_one():
    async def main():
        refused = []
        admission = Admission(2, 5.0, 4, refused.append)
        await admission.take("a")
        await admission.take("a")
        third = asyncio.ensure_future(admission.take("a"))
        await settle()
        assert not third.done()
        assert admission.waiters == 1
        admission.give_back("a")
        await asyncio.wait_for(third, 1)
        return admission.taken, admission.waiters, refused

    assert run(main()) == (2, 0, [])


def test_a_request_that_cannot_start_within_the_wait_is_refused_with_retry_after():
    async def main():
        refused = []
        admission = Admission(1, 0.05, 4, refused.append)
        await admission.take("a")
        with pytest.raises(ApiError) as err:
            await admission.take("a")
        return err.value, admission.waiters, admission.taken, refused

    err, waiters, taken, refused = run(main())
    assert (err.status, err.code, err.headers["Retry-After"]) == (503, "wait_timeout", "1")
    assert "50 ms" in err.message
    assert (waiters, taken, refused) == (0, 1, ["wait_timeout"])


def test_a_full_queue_refuses_at_once():
    async def main():
        refused = []
        admission = Admission(1, 5.0, 1, refused.append)
        await admission.take("a")
        waiting = asyncio.ensure_future(admission.take("a"))
        await settle()
        with pytest.raises(ApiError) as err:
            await admission.take("a")
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        return err.value, refused, admission.waiters

    err, refused, waiters = run(main())
    assert (err.status, err.code) == (503, "overloaded")
    assert (refused, waiters) == (["overloaded"], 0)


def test_a_freed_slot_goes_to_the_key_that_holds_fewest_before_a_floods_older_requests():
    async def main():
        admission = Admission(2, 5.0, 8)
        await admission.take("flood")
        await admission.take("flood")
        order = []

        async def ask(key: str) -> None:
            await admission.take(key)
            order.append(key)

        flood = [asyncio.ensure_future(ask("flood")) for _ in range(2)]
        await settle()
        light = asyncio.ensure_future(ask("light"))
        await settle()
        admission.give_back("flood")
        await settle()
        admission.give_back("flood")
        await settle()
        admission.give_back("light")
        await settle()
        await asyncio.wait_for(asyncio.gather(light, *flood), 1)
        return order

    assert run(main()) == ["light", "flood", "flood"]


def test_a_key_over_its_share_is_refused_at_once_while_another_waits():
    async def main():
        refused = []
        admission = Admission(4, 5.0, 8, refused.append)
        for _ in range(4):
            await admission.take("flood")
        light = asyncio.ensure_future(admission.take("light"))
        await settle()
        with pytest.raises(ApiError) as err:
            await admission.take("flood")
        admission.give_back("flood")
        await asyncio.wait_for(light, 1)
        return err.value, refused, dict(admission.held)

    err, refused, held = run(main())
    assert (err.status, err.code, err.kind) == (429, "over_share", "rate_limit_error")
    assert refused == ["over_share"]
    assert held == {"flood": 3, "light": 1}


def test_a_full_queue_makes_room_for_a_lighter_key_by_refusing_the_heaviests_newest():
    async def main():
        refused = []
        admission = Admission(1, 5.0, 2, refused.append)
        await admission.take("flood")
        first, newest = (asyncio.ensure_future(admission.take("flood")) for _ in range(2))
        await settle()
        light = asyncio.ensure_future(admission.take("light"))
        await settle()
        with pytest.raises(ApiError) as err:
            await newest
        admission.give_back("flood")  # to the older of the two waiters, as both keys hold none
        await asyncio.wait_for(first, 1)
        admission.give_back("flood")
        await asyncio.wait_for(light, 1)
        return err.value, refused, dict(admission.held), admission.waiters

    err, refused, held, waiters = run(main())
    assert (err.status, err.code) == (429, "over_share")
    assert refused == ["over_share"]
    assert (held, waiters) == ({"light": 1}, 0)


def test_a_waiter_pushed_out_just_as_its_wait_runs_out_is_refused_once_as_over_share(monkeypatch):
    async def main():
        refused = []
        admission = Admission(1, 5.0, 1, refused.append)
        await admission.take("flood")

        async def runs_out(ready, _timeout):
            ready.cancel()  # as wait_for does with what it waited on
            assert admission._make_room("light")  # a lighter key's push lands as the wait's time is up
            raise TimeoutError

        monkeypatch.setattr(asyncio, "wait_for", runs_out)
        with pytest.raises(ApiError) as err:
            await admission.take("flood")
        return err.value, refused, admission.waiters

    err, refused, waiters = run(main())
    assert (err.status, err.code) == (429, "over_share")
    assert refused == ["over_share"]  # not counted again as a wait that ran out
    assert waiters == 0


def test_a_client_that_leaves_while_it_waits_leaves_no_slot_taken():
    async def main():
        admission = Admission(1, 5.0, 4)
        held = await admission.hold("a")
        try:
            waiting = asyncio.ensure_future(admission.take("b"))
            await settle()
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
        finally:
            held.release()
        return admission.taken, admission.waiters, dict(admission.held), dict(admission.waiting)

    assert run(main()) == (0, 0, {}, {})  # and no empty queue kept for a key that waited once


def test_a_request_of_several_generations_takes_a_slot_for_each():
    async def main():
        admission = Admission(4, 0.05, 4)
        held = await admission.hold("a", 3)
        try:
            assert admission.taken == 3
            with pytest.raises(ApiError):
                await admission.take("a", 2)
        finally:
            held.release()
        return admission.taken

    assert run(main()) == 0


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="must be >= 0"):
        Admission(-1, 1.0, 0)


def test_a_request_whose_expected_wait_is_over_the_objective_is_refused_at_once():
    """Generations have held their slot 0.4 s lately. With the one slot taken just now, a new
    request would wait about 0.4 s (the running one's end) and one behind a waiter 0.8 s (a round
    more): past a 0.5 s objective that one is told no at once. A light key's estimate counts only
    the waiters served before it; a generation past its expected end frees its slot "at once"."""

    async def main():
        refused = []
        admission = Admission(1, 0.5, 8, refused.append)
        since = await admission.take("a")
        admission.give_back("a", since=since - 0.4)  # as if taken 0.4 s before
        assert 0.4 <= admission.hold_s < 1.4  # 0.4 s and the moment between the two lines
        admission.hold_s = 0.4
        started = await admission.take("a")  # the slot is free again: at once
        assert admission.expected_wait("a", now=started) == pytest.approx(0.4)
        assert admission.expected_wait("a", now=started + 1.0) == 0.0  # past its expected end
        first = asyncio.ensure_future(admission.take("a"))
        await settle()
        assert admission.waiters == 1
        assert admission.expected_wait("a", now=started) == pytest.approx(0.8)
        assert admission.expected_wait("light", now=started) == pytest.approx(0.4)  # "a" holds more: after it
        admission.started = [started]  # the estimate below as of the slot's start, whatever the clock says
        admission.hold_s = 10.0
        with pytest.raises(ApiError) as err:
            await admission.take("a")
        first.cancel()
        await settle()
        return err.value, refused, admission.waiters

    err, refused, waiters = run(main())
    assert (err.status, err.code, err.headers["Retry-After"], err.headers["X-Ftfleet-Refused"]) == (
        503, "overloaded", "1", "overloaded")  # fmt: skip
    assert "a slot would come free in about" in err.message
    assert refused == ["overloaded"]  # refused before any wait (a wait would end as wait_timeout)
    assert waiters == 0


def test_the_hold_estimate_follows_the_generations_as_a_moving_average():
    admission = Admission(2, 1.0, 4)
    first, second = admission._hold("a", 1), admission._hold("a", 1)
    admission.give_back("a", since=first - 1.0)
    admission.give_back("a", since=second - 2.0)
    assert 1.2 <= admission.hold_s < 2.2  # 1.0 + 0.2 x (2.0 - 1.0), and the moments between the lines
    assert admission.started == []
    admission._hold("a", 1)
    estimate = admission.hold_s
    admission.give_back("a")  # a slot given back unused: no generation ended
    assert admission.hold_s == estimate
    assert (admission.started, admission.taken) == ([], 0)
