"""Completion callback delivery against a real loopback receiver: retries with backoff on
server errors, none on a refusal, a bound on attempts."""

from __future__ import annotations

import asyncio

import pytest

from fnserve.jobs.callbacks import CallbackSender
from tests.jobs.callbacks import CallbackReceiver

DOCUMENT = {"id": "job-1", "state": "succeeded"}


@pytest.mark.parametrize(
    ("fail_first", "status", "attempts", "delivered"),
    [
        (0, 500, 1, True),  # delivered at once
        (2, 503, 3, True),  # two server errors, then delivered
        (9, 500, 3, False),  # still failing after the last of 3 attempts: dropped
        (9, 429, 3, False),  # "too many requests" is retried too
        (9, 404, 1, False),  # the receiver refuses: not retried
    ],
)
async def test_delivery(fail_first: int, status: int, attempts: int, delivered: bool) -> None:
    receiver = CallbackReceiver(fail_first=fail_first, status=status)
    sender = CallbackSender(attempts=3, timeout_s=5)
    try:
        sender.send(receiver.url, DOCUMENT)
        await sender.aclose(grace_s=10)
    finally:
        receiver.close()
    assert receiver.attempts == attempts
    assert receiver.received == ([DOCUMENT] if delivered else [])


async def test_an_unreachable_receiver_is_retried_then_dropped() -> None:
    receiver = CallbackReceiver()
    url = receiver.url
    receiver.close()  # nothing listens there any more
    sender = CallbackSender(attempts=2, timeout_s=1)
    sender.send(url, DOCUMENT)
    started = asyncio.get_running_loop().time()
    await sender.aclose(grace_s=10)
    assert asyncio.get_running_loop().time() - started >= 0.4  # one backoff of 0.5 s
