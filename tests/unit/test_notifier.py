"""The notification sender (``engine.runtime.notifying``) and its POST
(``engine.io.webhooks``): delivery, retries after a doubling backoff, the deadline of
one POST, giving up after the last attempt or on a refusal, the bounded line that
drops its oldest and counts it, and one receiver that hangs not holding another.

Time is a ``FakeClock`` and the receiver a fake ``post``: nothing waits on real time.
What must happen is awaited by yielding to the loop until it has (``until``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import cast

import httpx
import pytest
import structlog

from crs_controller.clients.kube import KubeClient
from crs_controller.core.notifications.delivery import ATTEMPTS, DEADLINE, Receiver, backoff
from crs_controller.core.notifications.payloads import (
    FOUND_BY_THE_OWNER,
    NOTIFIED_REASONS,
    Notice,
    notice,
)
from crs_controller.core.spec.objects import CRS, parse_crs
from crs_controller.engine.io import metrics
from crs_controller.engine.io.events import EventRecorder
from crs_controller.engine.io.webhooks import WebhookPoster
from crs_controller.engine.reconcile.context import Settings
from crs_controller.engine.runtime.controller import Controller
from crs_controller.engine.runtime.notifying import Notifier
from tests.unit.fake_clock import FakeClock
from tests.unit.memory_kube import MemoryKube

HANG = "hang"
Answer = int | None | str


async def until(condition: Callable[[], bool], turns: int = 10_000) -> None:
    """Yield to the loop until ``condition`` holds; a bounded number of turns, no time."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


def told(crs: str, reason: str = "RolloutHalted") -> Notice:
    made = notice(
        reason, "fleet", crs, "m", revision="r1", clusters=["c1"], id=crs, time=datetime.now(UTC)
    )
    assert made is not None
    return made


@dataclass
class FakeReceiver:
    """Answers from a script (then 200); ``HANG`` never answers. Records each POST."""

    clock: FakeClock
    answers: list[Answer] = field(default_factory=list)
    got: list[tuple[float, str, dict, str]] = field(default_factory=list)  # type: ignore[type-arg]
    cancelled: int = 0

    async def post(self, receiver: Receiver, raw: bytes, content_type: str) -> int | None:
        self.got.append((self.clock.now(), receiver.url, json.loads(raw), content_type))
        answer = self.answers.pop(0) if self.answers else 200
        if answer == HANG:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        assert not isinstance(answer, str)
        return answer

    def subjects(self) -> list[str]:
        return [body["subject"] for _, _, body, _ in self.got]


def counted(result: str) -> float:
    return metrics.NOTIFICATIONS.labels(result=result)._value.get()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def receiver(clock: FakeClock) -> FakeReceiver:
    return FakeReceiver(clock)


async def running(notifier: Notifier) -> AsyncIterator[None]:
    task = asyncio.create_task(notifier.run())
    try:
        yield
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def sender(
    clock: FakeClock, receiver: FakeReceiver, urls: Sequence[str] = ("http://a/",), **kw: int
) -> Notifier:
    receivers = [Receiver(u) for u in urls]
    return Notifier(receivers, receiver.post, clock, **kw)


async def test_a_notification_is_posted_once_as_a_cloudevent(
    clock: FakeClock, receiver: FakeReceiver
) -> None:
    sent = counted("sent")
    notifier = sender(clock, receiver)
    async for _ in running(notifier):
        notifier.tell(told("cni"))
        await until(lambda: counted("sent") == sent + 1)
    assert len(receiver.got) == 1
    _, url, body, content_type = receiver.got[0]
    assert (url, body["type"], body["subject"]) == (
        "http://a/",
        "dev.crs.rollouthalted",
        "fleet/cni",
    )
    assert content_type.startswith("application/cloudevents+json")


async def test_failures_are_retried_after_a_doubling_backoff(
    clock: FakeClock, receiver: FakeReceiver
) -> None:
    receiver.answers = [500, None, 503]
    sent, start = counted("sent"), clock.now()
    notifier = sender(clock, receiver)
    async for _ in running(notifier):
        notifier.tell(told("cni"))
        for attempt in (1, 2, 3):
            await until(lambda a=attempt: len(receiver.got) == a)
            wait = clock.now() + backoff(attempt)
            await until(lambda w=wait: clock.deadlines() == [w])
            clock.advance(backoff(attempt))
        await until(lambda: counted("sent") == sent + 1)
    times = [when - start for when, *_ in receiver.got]
    assert times == [0.0, 1.0, 3.0, 7.0]
    assert {body["id"] for _, _, body, _ in receiver.got} == {"cni"}  # the same event


async def test_a_post_past_its_deadline_is_cut_and_retried(
    clock: FakeClock, receiver: FakeReceiver
) -> None:
    receiver.answers = [HANG]
    sent, start = counted("sent"), clock.now()
    notifier = sender(clock, receiver)
    async for _ in running(notifier):
        notifier.tell(told("cni"))
        await until(lambda: len(receiver.got) == 1 and clock.deadlines() == [start + DEADLINE])
        clock.advance(DEADLINE)
        await until(lambda: clock.deadlines() == [start + DEADLINE + backoff(1)])
        assert receiver.cancelled == 1
        clock.advance(backoff(1))
        await until(lambda: counted("sent") == sent + 1)
    assert [when - start for when, *_ in receiver.got] == [0.0, DEADLINE + backoff(1)]


async def test_it_gives_up_after_the_last_attempt(clock: FakeClock, receiver: FakeReceiver) -> None:
    receiver.answers = [500] * ATTEMPTS
    failed = counted("failed")
    notifier = sender(clock, receiver)
    async for _ in running(notifier):
        notifier.tell(told("cni"))
        for attempt in range(1, ATTEMPTS):
            wait = clock.now() + backoff(attempt)
            await until(
                lambda a=attempt, w=wait: len(receiver.got) == a and clock.deadlines() == [w]
            )
            clock.advance(backoff(attempt))
        await until(lambda: counted("failed") == failed + 1)
        assert clock.deadlines() == []  # no further attempt waits
    assert len(receiver.got) == ATTEMPTS


async def test_a_refusal_is_not_retried(clock: FakeClock, receiver: FakeReceiver) -> None:
    receiver.answers = [404]
    failed = counted("failed")
    notifier = sender(clock, receiver)
    async for _ in running(notifier):
        notifier.tell(told("a"))
        notifier.tell(told("b"))
        await until(lambda: len(receiver.got) == 2)
        await until(lambda: counted("failed") == failed + 1)
    assert receiver.subjects() == ["fleet/a", "fleet/b"]


async def test_a_full_line_drops_its_oldest_and_counts_it(
    clock: FakeClock, receiver: FakeReceiver
) -> None:
    receiver.answers = [HANG]
    dropped = metrics.NOTIFICATIONS_DROPPED._value.get()
    notifier = sender(clock, receiver, limit=2)
    async for _ in running(notifier):
        notifier.tell(told("a"))
        await until(lambda: len(receiver.got) == 1)  # a is being posted: it hangs
        for name in ("b", "c", "d", "e"):
            notifier.tell(told(name))  # never waits, however full the line
        assert metrics.NOTIFICATIONS_DROPPED._value.get() == dropped + 2
        clock.advance(DEADLINE)
        await until(lambda: len(clock.deadlines()) == 1 and receiver.cancelled == 1)
        clock.advance(backoff(1))
        await until(lambda: len(receiver.got) == 4)
    assert receiver.subjects() == ["fleet/a", "fleet/a", "fleet/d", "fleet/e"]


async def test_a_receiver_that_hangs_holds_back_only_its_own_line(
    clock: FakeClock, receiver: FakeReceiver
) -> None:
    receiver.answers = [HANG]  # the first POST: to the first receiver
    notifier = sender(clock, receiver, urls=("http://hangs/", "http://answers/"))
    async for _ in running(notifier):
        notifier.tell(told("a"))
        notifier.tell(told("b"))
        await until(lambda: len(receiver.got) == 3)
        assert receiver.cancelled == 0  # the first receiver still hangs
    assert [(url, body["subject"]) for _, url, body, _ in receiver.got] == [
        ("http://hangs/", "fleet/a"),
        ("http://answers/", "fleet/a"),
        ("http://answers/", "fleet/b"),
    ]


async def test_the_post_sends_the_token_and_reads_no_redirect_or_body() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/moved":
            return httpx.Response(301, headers={"Location": "http://elsewhere/"})
        if request.url.path == "/down":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(202, content=b"x" * 10_000_000)

    poster = WebhookPoster("crs-controller/test", transport=httpx.MockTransport(answer))
    try:
        token = Receiver("https://hooks/in", token="s3cret")
        assert await poster.post(token, b"{}", "application/json") == 202
        assert await poster.post(Receiver("https://hooks/moved"), b"{}", "x") == 301
        assert await poster.post(Receiver("https://hooks/down"), b"{}", "x") is None
    finally:
        await poster.close()
    assert seen[0].headers["Authorization"] == "Bearer s3cret"
    assert seen[0].headers["Content-Type"] == "application/json"
    assert "Authorization" not in seen[1].headers
    assert [str(r.url) for r in seen] == [
        "https://hooks/in",
        "https://hooks/moved",
        "https://hooks/down",
    ]


async def test_a_post_that_raises_is_no_answer_and_ends_nothing(
    clock: FakeClock, receiver: FakeReceiver
) -> None:
    async def post(to: Receiver, raw: bytes, content_type: str) -> int | None:
        if to.url.startswith("http://breaks/"):
            raise ValueError("cannot encode http://breaks/T0/secret")
        return await receiver.post(to, raw, content_type)

    failed = counted("failed")
    urls = ("http://breaks/T0/secret", "http://answers/")
    notifier = Notifier([Receiver(u) for u in urls], post, clock)
    with structlog.testing.capture_logs() as logs:
        async for _ in running(notifier):
            notifier.tell(told("a"))
            for attempt in range(1, ATTEMPTS):  # retried as when no answer came
                wait = clock.now() + backoff(attempt)
                await until(lambda w=wait: clock.deadlines() == [w])
                clock.advance(backoff(attempt))
            await until(lambda: counted("failed") == failed + 1)
            notifier.tell(told("b"))  # the sender still runs
            await until(lambda: receiver.subjects() == ["fleet/a", "fleet/b"])
    assert {u for _, u, _, _ in receiver.got} == {"http://answers/"}
    unanswered = [e for e in logs if e["event"] == "notification not answered"]
    assert len(unanswered) == ATTEMPTS
    assert unanswered[0]["error"] == "ValueError"
    assert unanswered[0]["receiver"] == "http://breaks"
    assert "secret" not in repr(logs)


async def test_the_post_answers_none_whatever_httpx_raises() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        raise RuntimeError(f"unexpected: {request.url}")

    poster = WebhookPoster("crs-controller/test", transport=httpx.MockTransport(answer))
    try:
        with structlog.testing.capture_logs() as logs:
            # A host httpx cannot encode, a token no header can carry, a transport bug.
            assert await poster.post(Receiver("http://xn--/T0/secret"), b"{}", "x") is None
            accented = Receiver(
                "https://hooks/in", token="s\N{LATIN SMALL LETTER E WITH ACUTE}cret"
            )
            assert await poster.post(accented, b"{}", "x") is None
            assert await poster.post(Receiver("https://hooks/T0/secret"), b"{}", "x") is None
    finally:
        await poster.close()
    assert [e["error"] for e in logs] == ["IDNAError", "UnicodeEncodeError", "RuntimeError"]
    assert "secret" not in repr(logs) and "cret" not in repr(logs)


def a_crs(revision: str | None = "rev-status") -> CRS:
    crs = parse_crs(
        {
            "apiVersion": "addons.crs.dev/v1alpha1",
            "kind": "ClusterResourceSet",
            "metadata": {"name": "cni", "namespace": "fleet", "uid": "u1"},
            "spec": {"clusterSelector": {}, "resources": [{"kind": "ConfigMap", "name": "a"}]},
            "status": {"revision": revision} if revision else {},
        }
    )
    return crs


async def test_events_of_a_notified_reason_are_handed_on_with_their_clusters() -> None:
    mgmt = MemoryKube("management")
    handed: list[Notice] = []
    events = EventRecorder(cast(KubeClient, mgmt), handed.append)
    crs = a_crs()
    await events.emit(crs, "Normal", "RolloutStarted", "rolling out revision r2")
    await events.emit(
        crs, "Warning", "RolloutHalted", "halted", clusters=["c2", "c1"], revision="r2"
    )
    await events.emit(crs, "Warning", "DeletionRefused", "cluster c3: refused", clusters=["c3"])
    assert [(n.reason, n.revision, n.clusters) for n in handed] == [
        ("RolloutHalted", "r2", ("c1", "c2")),
        ("DeletionRefused", "rev-status", ("c3",)),  # the status's revision
    ]
    assert len({n.id for n in handed}) == 2
    # The Events themselves are written as before, notified or not.
    reasons = sorted(o["reason"] for k, o in mgmt.objects.items() if k[1] == "Event")
    assert reasons == ["DeletionRefused", "RolloutHalted", "RolloutStarted"]


def test_the_rollout_is_told_by_the_leader_and_a_pass_finding_by_the_owner() -> None:
    handed: list[Notice] = []
    controller = Controller(
        MemoryKube("management"), Settings(), "cluster.x-k8s.io/v1beta1", notify=handed.append
    )
    controller.leading = False  # a shard member, as ``join`` leaves it
    for reason in NOTIFIED_REASONS:
        controller._tell(told(f"follower-{reason}", reason))
    controller.leading = True  # as ``lead`` or an unsharded process has it
    controller._tell(told("leader"))
    # Only the member owning the cluster emits these Events: it tells them.
    owners = [f"follower-{reason}" for reason in NOTIFIED_REASONS if reason in FOUND_BY_THE_OWNER]
    assert owners == ["follower-ValidationFailed", "follower-DeletionRefused"]
    assert [n.crs for n in handed] == [*owners, "leader"]


def test_a_poster_that_never_posts_does_not_load_its_http_client() -> None:
    # The controller builds its poster whether or not a receiver is configured.
    program = (
        "import sys, asyncio\n"
        "from crs_controller.app import runner\n"
        "from crs_controller.engine.io.webhooks import WebhookPoster\n"
        "asyncio.run(WebhookPoster('crs-controller/test').close())\n"
        "print('httpx' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
