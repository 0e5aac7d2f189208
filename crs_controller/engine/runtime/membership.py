"""Who acts: the leader Lease, and a shard set's members and which Clusters are ours.

Both are ``coordination.k8s.io`` Leases, read and written through one helper
(``Leases``) on one injected clock; what a Lease says and whether it may be taken is
decided in ``core.membership.lease``.

**Leader election** (``LeaderElector``), like client-go's leaderelection: only the
holder runs the controller (in a shard set: only the holder writes CRS status and
finalizers). A holder that cannot renew within two thirds of the lease duration stops
(the process exits and is restarted) before a standby, which waits the full
duration, can take over: each renewal, its requests included, is cut off at that
deadline. A standby times the holder's Lease on its own clock, from when it saw the
renewal change (``core.membership.shard.Members``, as the shard Leases are judged),
never by comparing the holder's ``renewTime`` with its own wall clock: skew between
nodes neither lets a standby take a Lease renewed a moment ago nor delays a takeover.

**Shard membership** (``ShardMembership``): each member applies its own Lease
(labelled ``addons.crs.dev/shard-member``) every third of the lease duration, timed
from sending to sending, and watches the others'. Who is live is judged by
``core.membership.shard.Members`` from when renewals were *seen*; a Cluster belongs
to the owner of its bucket (of 1,024, from ``namespace/name``), a bucket to the live
member rendezvous hashing picks (``core.membership.shard.owner``), so a member
joining or leaving moves only its own Clusters. Its Lease carries its incarnation,
drawn anew whenever it starts acting, so that the member set it comes back to after
it stopped (a restart, a lapse) is never the one it left: what it contributed before
is not taken as current (``core.membership.shard.members_stamp``). This replica
counts itself live only while its last renewal is younger than two thirds of the
lease duration, timed from when it was sent: the others wait for the full duration
before they take its Clusters, so a replica cut off from the API server stops acting
before anyone else starts. What it owns is asked of that window each time, never of
a loop that must wake to look again, and no loop that does awaits a request. A
renewal refused is tried again within seconds, in time to be answered before that
deadline; one not answered is cut off at that deadline, not left to the client's
longer request timeout. A retry cut off is followed at once by a renewal in a new
incarnation. Any other renewal cut off, or answered too late to
act on, may still have been committed, so the others would see this replica renewing while it
does not act: it renews no more for LAPSE lease durations, so they count it out and
take its Clusters, then starts again in a new incarnation. A Lease
deleted under it also stops it at once, until it is renewed; so does another process
renewing it (two under one identity), while that one keeps renewing.

The others are counted out only on what the watch has been shown to bring. A watch
can die without a word (a connection dropped by a NAT or a load balancer): no event
comes, and every other member would look silent. This replica's own renewals come
back through the same watch, in order with the others': once the watch shows a
renewal of ours, it has shown every renewal written before ours was sent. So another
member is counted out only when it was silent for its lease duration up to the
sending of our last renewal the watch showed (at most one renewal period later than
the duration itself, on a live watch). A watch that shows none of our renewals for a
lease duration is stale: the Leases are listed and watched again.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from typing import TypeVar

import structlog

from crs_controller.clients.api import KubeAPI, Obj
from crs_controller.core.errors import APIError, CRSError, Unreachable, failure_level
from crs_controller.core.membership.lease import (
    LEASE_API,
    LEASE_KIND,
    LeaseRecord,
    free_for,
    leader_lease,
    member_lease,
    released,
)
from crs_controller.core.membership.shard import Members, lease_name, new_incarnation, owner
from crs_controller.engine.io.informer import Informer, WatchSpec
from crs_controller.engine.io.waiting import WaitingClock, by_deadline, sleep_for
from crs_controller.engine.runtime.tasks import supervised

log = structlog.get_logger(__name__)

MEMBER_LABEL = "addons.crs.dev/shard-member"
FIELD_MANAGER = "crs-controller-shard"
LEADER_LEASE = "crs-controller"
RENEW_DEADLINE = 2 / 3  # of the lease duration
RETRY_SECONDS = 2.0  # after a failed renewal, at most a sixth of the lease duration
ATTEMPT_FLOOR = 1.0  # seconds a shard Lease renewal request is given at least
STALE_AFTER = 4  # lease durations past expiry
SENT_KEPT = 8  # renewals remembered until the watch shows them
TOKENS_KEPT = 64  # own incarnation tokens remembered, the latest drawn
SERVER_REQUEST_TIMEOUT = 60.0  # seconds: the API server's default --request-timeout
LAPSE = 4 / 3  # of the lease duration: no renewal after one answered too late to act on

_T = TypeVar("_T")

Changed = Callable[[frozenset[str], frozenset[str]], None]  # members before, after


class Leases:
    """The Leases of one namespace: every read and write of either kind goes here."""

    def __init__(self, client: KubeAPI, namespace: str) -> None:
        self.client = client
        self.namespace = namespace

    async def read(self, name: str) -> Obj | None:
        return await self.client.get(LEASE_API, LEASE_KIND, name, self.namespace)

    async def write(self, body: Obj) -> None:
        """Create ``body``, or replace the Lease it was read from (its resourceVersion:
        a Conflict if someone else wrote it meanwhile)."""
        if "resourceVersion" in (body.get("metadata") or {}):
            await self.client.replace(body)
        else:
            await self.client.create(body)

    async def apply(self, body: Obj) -> None:
        await self.client.apply(body, field_manager=FIELD_MANAGER)

    async def delete(self, name: str) -> None:
        await self.client.delete(LEASE_API, LEASE_KIND, name, self.namespace)

    def watch_spec(self) -> WatchSpec:
        return WatchSpec(LEASE_API, LEASE_KIND, self.namespace, label_selector=MEMBER_LABEL)


class _CutOff(Unreachable):
    """A shard Lease renewal not answered by its deadline: it may yet be committed."""


def replica_identity(environ: Mapping[str, str] = os.environ) -> str:
    """This replica's name, as the leader Lease's holder, as a shard member and in its
    User-Agent: the pod's name (``$POD_NAME``, from the Downward API), so audit logs
    and ``kubectl get lease`` name the pod; else the host name and a random suffix, so
    two processes on one host are two replicas. Random on every call without a pod
    name: call it once per process."""
    return environ.get("POD_NAME") or f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


def log_lease_failure(event: str, lease: str, error: CRSError, **fields: object) -> None:
    status = error.status if isinstance(error, APIError) else None
    log.log(failure_level(error), event, lease=lease, status=status, error=str(error), **fields)


class LeaderElector:
    """Holds the leader Lease ``namespace/name`` for ``identity``."""

    def __init__(
        self,
        leases: Leases,
        *,
        clock: WaitingClock,
        name: str = LEADER_LEASE,
        identity: str | None = None,
        lease_seconds: float = 15,
        retry_seconds: float = 2.0,
    ) -> None:
        self._leases = leases
        self._clock = clock
        self._name = name
        self.identity = identity or replica_identity()
        self._lease_seconds = lease_seconds
        self._retry = min(retry_seconds, lease_seconds / 3)
        self._seen = Members()  # the holder's renewals, as this candidate saw them
        self._watched = ""  # the holder they are of
        self._held_since = -math.inf  # when our last successful write was sent

    @property
    def lease(self) -> str:
        """``namespace/name`` of the leader Lease, as log lines name it."""
        return f"{self._leases.namespace}/{self._name}"

    async def acquire(self) -> None:
        """Return once this process holds the lease. Each attempt, its requests
        included, is cut off at the renew deadline after its sending (a lease taken
        later could not be kept) and made again a retry period later."""
        while not await self._try_by(self._clock.now() + self._lease_seconds * RENEW_DEADLINE):
            await sleep_for(self._clock, self._retry)
        log.info("became leader", lease=self.lease, identity=self.identity)

    async def keep(self) -> None:
        """Renew until cancelled; raise if the lease is lost.

        Each renewal, its requests included, is cut off at the renew deadline: two
        thirds of the lease duration after the last renewal that succeeded was sent.
        So this raises by then whatever the server does (a request that hangs
        included), before a standby, which waits the full duration, can take over."""
        deadline = self._held_since + self._lease_seconds * RENEW_DEADLINE
        while True:
            await self._clock.sleep_until(
                min(self._clock.now() + self._retry, deadline), asyncio.Event()
            )
            if await self._try_by(deadline):
                deadline = self._held_since + self._lease_seconds * RENEW_DEADLINE
            elif self._clock.now() >= deadline:
                seconds = self._lease_seconds * RENEW_DEADLINE
                raise RuntimeError(f"leader lease lost: {self.lease} not renewed in {seconds:g}s")

    async def release(self) -> None:
        """Give the lease up on a clean shutdown, so a standby takes over at once
        instead of after the lease duration."""
        try:
            lease = await self._leases.read(self._name)
            if lease is None or LeaseRecord.parse(lease).holder != self.identity:
                return
            await self._leases.write(released(lease))
            log.info("released leadership", lease=self.lease)
        except CRSError as exc:
            log_lease_failure("lease not released", self.lease, exc)

    async def _try_by(self, deadline: float) -> bool:
        """``_try``, cut off at ``deadline`` on our clock: a request the server never
        answers fails then, instead of at the client's (longer) request timeout."""
        try:
            return await by_deadline(self._clock, deadline, self._try())
        except TimeoutError:
            log.warning("lease request not answered by its deadline", lease=self.lease)
            return False

    async def _try(self) -> bool:
        """Take or renew the lease if it is free for us; True when we hold it now."""
        sent = self._clock.now()
        try:
            lease = await self._leases.read(self._name)
            record = LeaseRecord.parse(lease) if lease is not None else None
            if not self._free(record):
                return False
            body = leader_lease(
                lease,
                name=self._name,
                namespace=self._leases.namespace,
                identity=self.identity,
                duration=self._lease_seconds,
                now=self._clock.wall(),
            )
            await self._leases.write(body)
        except CRSError as exc:
            log_lease_failure("lease not acquired", self.lease, exc)
            return False
        self._held_since = sent
        return True

    def _free(self, record: LeaseRecord | None) -> bool:
        """``free_for`` on our own clock; only the current holder's renewals are kept."""
        if record is not None and record.holder != self._watched:
            self._seen.forget(self._watched)
            self._watched = record.holder
        return free_for(record, self.identity, self._seen, self._clock.now(), self._lease_seconds)


def _forget_before(kept: dict[str, _T], key: str) -> None:
    """Delete the entries of ``kept`` put in before ``key`` (all, if it is not there)."""
    for older in list(kept):
        if older == key:
            return
        del kept[older]


def member_identity(record: LeaseRecord) -> str:
    """The member a shard Lease stands for: its holder, else (written by hand) its name."""
    return record.holder or record.name


class ShardMembership:
    """``owns(namespace, name)`` answers for this replica; ``on_change(before, after)``
    is told whenever the set of members this replica acts with changes, or only
    their incarnations (``before`` then equals ``after``)."""

    def __init__(
        self,
        client: KubeAPI,
        namespace: str,
        identity: str,
        *,
        lease_seconds: float,
        clock: WaitingClock,
        on_change: Changed,
    ) -> None:
        self.identity = identity
        self.lease = lease_name(identity)
        self._leases = Leases(client, namespace)
        self._lease_seconds = lease_seconds
        self._retry = min(RETRY_SECONDS, lease_seconds / 6)
        self._clock = clock
        self._on_change = on_change
        self._members = Members(kept_for=self._landing)
        self._lease_names: dict[str, str] = {}  # identity -> its Lease's name
        self._renewed_at: float | None = None  # when our last renewal acted on was sent
        self._unseen_since: float | None = None  # first renewal the watch has not shown
        self._sent: dict[str, float] = {}  # our renewals' markers, when each was sent
        self._shown_up_to: float | None = None  # the watch brought all written before
        self._rewatched_at: float | None = None
        self._rewatch = asyncio.Event()
        self._retrying = False  # the next renewal tries a refused one again
        self._view: frozenset[str] = frozenset()
        # This replica's incarnation token, drawn anew whenever it starts acting again;
        # those its renewals may still show (``_sending``), the latest shown; the members'.
        self._incarnation = new_incarnation()
        self._tokens, self._shown_token = {self._incarnation: clock.now()}, ""
        self._view_incarnations: Mapping[str, str] = {}
        # Another process renewing our Lease (``_seen_own``): the watch showed one of
        # ours since we last stood aside; until when we stand aside, if we do.
        self._own_shown, self._aside_until = False, -math.inf
        self._wake = asyncio.Event()
        self.ready = asyncio.Event()
        self._informer: Informer[LeaseRecord] = Informer(
            client, self._leases.watch_spec(), LeaseRecord.parse, self.on_lease, clock=clock
        )

    # -- what the controller asks -----------------------------------------------------

    @property
    def members(self) -> frozenset[str]:
        """The members this replica acts with; none once its acting window has ended,
        from that very moment: not when a loop wakes to ``refresh`` (which tells
        ``on_change``), as a loop held up by a request that hangs would wake late,
        while the others, waiting the full lease duration, take its Clusters."""
        return self._view if self._acting(self._clock.now()) else frozenset()

    @property
    def incarnations(self) -> Mapping[str, str]:
        """The incarnation token of each of ``members`` ("": its Lease carries none):
        the member set's stamp covers them, never its buckets."""
        return self._view_incarnations if self._acting(self._clock.now()) else {}

    @property
    def standing_aside(self) -> bool:
        """Another process renews this replica's Lease (two under one identity), and
        this one stands aside: what the identity holds is that process's."""
        return self._aside_until > self._clock.now()

    def owns(self, namespace: str, name: str) -> bool:
        return owner(self.members, f"{namespace}/{name}") == self.identity

    # -- running ----------------------------------------------------------------------

    async def run(self) -> None:
        """Renew, watch, look again when a member may have expired, and delete the
        Leases departed members left: each in a task of its own, so that a request the
        server never answers holds up none of the others."""
        async with asyncio.TaskGroup() as group:
            supervised(group, self._renew_loop(), "shard-lease")
            supervised(group, self._watch_loop(), "watch-shard-leases")
            await self.join(self._informer.synced)
            supervised(group, self._expiry_loop(), "shard-expiry")
            supervised(group, self._stale_loop(), "shard-stale-leases")

    async def join(self, listed: asyncio.Event) -> None:
        """Start acting once the members' Leases have settled: this replica's own Lease
        written, the others' listed (``listed``), then one renewal period more. Every
        live member renews within that period, so replicas started together see each
        other before either reconciles a Cluster, instead of each taking the whole
        fleet for the moment."""
        await listed.wait()
        while self._renewed_at is None:
            await self._clock.sleep_until(None, self._wake)
            self._wake.clear()
        await sleep_for(self._clock, self._lease_seconds / 3)
        self.refresh()
        self.ready.set()
        log.info("joined the shard set", identity=self.identity, members=sorted(self._view))

    async def release(self) -> None:
        """Delete this replica's Lease on a clean shutdown: the others take its
        Clusters at once instead of after the lease duration. Not while it stands
        aside: the Lease is another process's then."""
        self._renewed_at = None
        self.refresh()
        if self.standing_aside:
            return
        try:
            await self._leases.delete(self.lease)
            log.info("left the shard set", identity=self.identity)
        except CRSError as exc:
            log_lease_failure("shard lease not released", self._where(self.lease), exc)

    async def _watch_loop(self) -> None:
        """List and watch the members' Leases; start again from a new list when the
        watch is stale (``_check_watch``)."""
        while True:
            watching = asyncio.ensure_future(self._informer.run())
            rewatch = asyncio.ensure_future(self._rewatch.wait())
            try:
                await asyncio.wait({watching, rewatch}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (rewatch, watching):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task  # the watch's failure, if it failed, goes up
            self._rewatch.clear()

    def _check_watch(self) -> None:
        """Ask for the Lease watch to start again when it is stale, and again every
        lease duration while it stays so."""
        now = self._clock.now()
        if not self._watch_stale(now):
            return
        if self._rewatched_at is not None and now - self._rewatched_at < self._lease_seconds:
            return
        self._rewatched_at = now
        assert self._unseen_since is not None
        unseen = round(now - self._unseen_since, 1)
        log.warning("shard lease watch stale: listing again", lease=self.lease, unseen_for=unseen)
        self._rewatch.set()

    def _watch_stale(self, now: float) -> bool:
        """Has a renewal of this replica's own Lease gone unseen by the watch for a
        lease duration? A live watch shows each within moments."""
        unseen = self._unseen_since
        return unseen is not None and now - unseen >= self._lease_seconds

    async def _renew_loop(self) -> None:
        while True:
            while self.standing_aside:  # pushed on meanwhile? then again
                await self._clock.sleep_until(self._aside_until, asyncio.Event())
            wait = await self._renew()
            self._wake.set()
            await sleep_for(self._clock, wait)

    async def _renew(self) -> float:
        """Renew this replica's Lease once; the seconds to wait before the next. That
        is sent a third of the lease duration after this one was *sent*, as its
        acting window is timed: each renewal has a full third to be answered before
        the window ends, however long this one's answer took.

        Starting, or back after it stopped acting (its Lease lapsed or was deleted),
        it does so in a new incarnation, so that what it contributed before is never
        taken as current. A renewal refused is tried again soon, as leader election
        does, well before the renew deadline: one refused request is no lapse. One
        answered after the deadline of the window it was sent in, or after its own
        (sent plus two thirds of the lease duration), or cut off there, is not acted
        on, and the Lease is left to lapse (``_lapse``). Nor is one acted on if
        another process was seen renewing this Lease meanwhile (``_rival``)."""
        sent = self._clock.now()
        starting = not self._acting(sent)
        if starting:
            self._incarnation = new_incarnation()
        retry, self._retrying = self._retrying and not starting, False
        body = self._lease_body()
        marker = LeaseRecord.parse(body).renew_marker
        self._sending(marker, sent)
        try:
            await self._apply_by_deadline(body, sent)
        except _CutOff:
            return self._lapse("shard lease renewal not answered by its deadline", retry)
        except CRSError as exc:
            log_lease_failure("shard lease not renewed", self._where(self.lease), exc)
            self._retrying = True
            return self._retry_wait(self._clock.now())
        answered = self._clock.now()
        if self._aside_until > answered:  # another process seen meanwhile
            return 0.0
        late = answered >= sent + self._lease_seconds * RENEW_DEADLINE
        if late or not (starting or self._acting(answered)):
            return self._lapse("shard lease renewal answered too late to act on", retry)
        self._acted_on(sent, unseen=marker in self._sent)  # its marker noted on sending
        return max(0.0, sent + self._lease_seconds / 3 - answered)

    def _retry_wait(self, now: float) -> float:
        """The seconds to wait before trying a refused renewal again: the retry
        period, but no later than a sixth of the lease duration before the acting
        window ends, so that on a server slow to answer (a refusal too) the retry is
        still answered within the window; the retry period once that time is past."""
        deadline = self._own_deadline()
        if deadline is None:
            return self._retry
        until_last = deadline - self._lease_seconds / 6 - now
        return min(self._retry, until_last) if until_last >= 0 else self._retry

    def _lapse(self, event: str, retry: bool = False) -> float:
        """A renewal of ours was not acted on, yet the server may have committed it:
        renewed again at once, and again too late, the others would see this replica
        renew, and count it in with its Clusters unowned, for as long as that lasts.
        So none is sent for LAPSE lease durations: the others count it out (a lease
        duration after they saw it, up to a renewal period later) and take its
        Clusters; then it starts again, in a new incarnation. The seconds to wait.

        Not after a ``retry`` of a refused renewal sent while acting: that tells of
        one refusal, not of a server answering too late. It renews again at once, in
        a new incarnation; if that one is not acted on either, the Lease lapses."""
        wait = 0.0 if retry else self._lease_seconds * LAPSE
        log.warning(event, lease=self._where(self.lease), renews_again_in=round(wait, 1))
        return wait

    def _sending(self, marker: str, now: float) -> None:
        """A renewal with renew marker ``marker`` goes out now, in our incarnation.
        The marker is noted before the answer: the watch may show the renewal first.
        So is the token, with the time (``_forget_tokens`` tells how long it is
        kept). Of the tokens, the latest TOKENS_KEPT drawn: one is drawn only when a
        renewal is sent while not acting, at most one per retry period, so they cover
        two minutes of renewals refused with none shown."""
        self._note_sent(marker, now)
        self._tokens[self._incarnation] = now  # a token sent before keeps its place
        while len(self._tokens) > TOKENS_KEPT:
            del self._tokens[next(iter(self._tokens))]

    async def _apply_by_deadline(self, body: Obj, sent: float) -> None:
        """Apply this replica's Lease, cut off at the renew deadline (of its acting
        window, else of this renewal), at least ATTEMPT_FLOOR after ``sent``: a
        request the server never answers fails then, as a refused one does, instead
        of at the client's request timeout, which may be longer than the window."""
        acting_until = self._own_deadline() if self._acting(sent) else None
        deadline = acting_until or sent + self._lease_seconds * RENEW_DEADLINE
        deadline = max(deadline, sent + ATTEMPT_FLOOR)
        try:
            await by_deadline(self._clock, deadline, self._leases.apply(body))
        except TimeoutError:
            raise _CutOff(f"no answer within {deadline - sent:.1f}s") from None

    async def _expiry_loop(self) -> None:
        """Tell ``on_change`` of the members as they change without a Lease event: at a
        member's expiry, at our own renew deadline, when the watch would be stale, and
        every lease duration anyway. It awaits no request, so it is never late."""
        while True:
            now = self._clock.now()
            deadlines = [self._members.next_expiry(now), self._own_deadline(), self._stale_at()]
            due = min([d for d in deadlines if d is not None and d > now], default=None)
            await self._clock.sleep_until(
                min(due or math.inf, now + self._lease_seconds), self._wake
            )
            self._wake.clear()
            self.refresh()
            self._check_watch()

    async def _stale_loop(self) -> None:
        """Clear the Leases left by replicas that died, every lease duration."""
        while True:
            await sleep_for(self._clock, self._lease_seconds)
            await self._clear_stale()

    async def _clear_stale(self) -> None:
        """Delete the Leases of members silent for STALE_AFTER lease durations: a
        replacement pod has a new name, so nobody else would ever renew them. Only
        while acting, each request cut off at our renew deadline, as the renewals are:
        a replica that stopped acting deletes nothing."""
        now, deadline = self._clock.now(), self._own_deadline()
        if deadline is None or now >= deadline or self._watch_stale(now):
            return  # nothing is known of the others while the watch is stale
        grace = self._lease_seconds * STALE_AFTER
        for identity in self._members.stale(self._known_up_to(now), grace):
            if not await self._remove_stale(identity, deadline):
                return

    async def _remove_stale(self, identity: str, deadline: float) -> bool:
        """Delete the Lease ``identity`` left by ``deadline``, and forget the member
        (refused too: a list that shows it again brings it back). False when cut off
        at the deadline: it is kept, to be tried again while acting."""
        name = self._lease_names.get(identity, lease_name(identity))
        try:
            await by_deadline(self._clock, deadline, self._leases.delete(name))
            log.info("removed the lease of a departed member", identity=identity)
        except TimeoutError:
            log.warning("stale lease not removed by the renew deadline", lease=self._where(name))
            return False
        except CRSError as exc:
            where = self._where(name)
            log_lease_failure("stale lease not removed", where, exc, identity=identity)
        self._forget(identity)
        return True

    def _forget(self, identity: str) -> None:
        """Another member's Lease is gone, or deleted by us: it is counted out."""
        self._members.forget(identity)
        self._lease_names.pop(identity, None)

    def _where(self, name: str) -> str:
        return f"{self._leases.namespace}/{name}"

    def renewed(self, marker: str = "", sent: float | None = None) -> None:
        """This replica's Lease was just written, with renew marker ``marker``, by a
        request sent at ``sent`` (now if not given). Its acting window is timed from
        the sending: the others saw the renewal no earlier than that."""
        sent = self._clock.now() if sent is None else sent
        if marker:
            self._note_sent(marker, sent)
        self._acted_on(sent, unseen=True)

    def _acted_on(self, sent: float, *, unseen: bool) -> None:
        """Act on our renewal sent at ``sent``; ``unseen``: the watch has not shown it
        yet (it may have, before the answer came: then it tells nothing stale)."""
        self._renewed_at = sent
        if unseen and self._unseen_since is None:
            self._unseen_since = self._clock.now()

    def _note_sent(self, marker: str, sent: float) -> None:
        """Our renewal ``marker`` was sent at ``sent``: once the watch shows it, it has
        shown every Lease written before then (``_shown``)."""
        self._sent[marker] = sent
        while len(self._sent) > SENT_KEPT:
            del self._sent[next(iter(self._sent))]

    def _seen_own(self, record: LeaseRecord) -> None:
        """The watch showed this replica's Lease: one of its renewals, or another
        process's (``_rival``)."""
        token, now = record.incarnation, self._clock.now()
        self._forget_tokens(now)
        if token not in self._tokens:
            if self._own_shown or self.standing_aside:
                self._rival(token)
            return  # else left by a process before this one, or by hand
        if token not in self._drawn_before_shown():
            self._shown_token = token
            self._forget_tokens(now)
        self._own_shown = True
        self._shown(record.renew_marker)

    def _forget_tokens(self, now: float) -> None:
        """Forget our tokens no renewal can be shown in any more: those drawn before
        one the watch has shown, and last sent over ``_landing`` ago. Both: a
        renewal cut off may be committed long after it was sent (on a slow server,
        after the next incarnation's renewals were shown), up to ``_landing``; and
        one committed in time is shown only when a watch that was down lists the
        Leases again, however long after, but before any renewal sent later."""
        for token in self._drawn_before_shown():
            if now - self._tokens[token] > self._landing:
                del self._tokens[token]

    def _drawn_before_shown(self) -> list[str]:
        """Our tokens drawn before the latest the watch has shown (none once that
        one is no longer kept: every token kept was drawn after it)."""
        drawn = list(self._tokens)
        return drawn[: drawn.index(self._shown_token)] if self._shown_token in drawn else []

    @property
    def _landing(self) -> float:
        """How long after its sending a request may still be committed. The server
        decides, not our client: it is never told our deadlines, and goes on with a
        request whose client has gone, until its request timeout; then storage may
        still commit what it was handed before, for which a lease duration is given."""
        return SERVER_REQUEST_TIMEOUT + self._lease_seconds

    def _rival(self, token: str) -> None:
        """Another process renewed this replica's Lease after the watch showed ours:
        two processes share this identity (a hard-coded ``$POD_NAME``, a pod
        force-deleted while its process still runs). Each renewal would draw the
        others' member set anew. Of the two tokens the greater (one that is not 32
        hex digits, written by an earlier release, counts as greatest) keeps the
        Lease: the other process stops acting and renewing until the Lease has been
        left unrenewed for a lease duration, then starts again in a new incarnation.
        The tokens are compared only to decide whether to stand aside: while standing
        aside, any renewal not our own extends it, whatever its token (the other
        process may have started a new incarnation meanwhile)."""
        standing = self.standing_aside
        if not standing and token and token < self._incarnation:
            log.error(
                "another process renews this shard member's lease; it stands aside",
                identity=self.identity,
                lease=self._where(self.lease),
            )
            return
        if not standing:
            log.error(
                "another process renews this shard member's lease: standing aside while it renews",
                identity=self.identity,
                lease=self._where(self.lease),
            )
        self._aside_until = self._clock.now() + self._lease_seconds
        self._own_shown = False
        self._renewed_at = None

    def _shown(self, marker: str) -> None:
        """The watch showed this replica's renewal ``marker``: it is live, and has
        shown every Lease written before that renewal was sent."""
        self._unseen_since = None
        if (sent := self._sent.get(marker)) is not None:
            self._shown_up_to = sent
            _forget_before(self._sent, marker)
            del self._sent[marker]

    def _known_up_to(self, now: float) -> float:
        """Until when the others' renewals are known: now, or when the watch was last
        shown complete (``-inf`` before it ever was: nobody is counted out)."""
        return min(now, -math.inf if self._shown_up_to is None else self._shown_up_to)

    def _stale_at(self) -> float | None:
        """When the watch counts as stale if it shows no renewal of ours till then."""
        unseen = self._unseen_since
        return None if unseen is None else unseen + self._lease_seconds

    def _own_deadline(self) -> float | None:
        if self._renewed_at is None:
            return None
        return self._renewed_at + self._lease_seconds * RENEW_DEADLINE

    def _acting(self, now: float) -> bool:
        deadline = self._own_deadline()
        return deadline is not None and now < deadline

    def on_lease(self, old: LeaseRecord | None, new: LeaseRecord | None) -> None:
        """The Lease watch's handler: note a member's renewal, or its going."""
        now = self._clock.now()
        if new is None:
            assert old is not None
            if member_identity(old) == self.identity:
                # Deleted under us: the others already count us out.
                self._renewed_at = None
            else:
                self._forget(member_identity(old))
        elif (identity := member_identity(new)) != self.identity:
            self._lease_names[identity] = new.name
            self._members.observe(identity, new.renew_marker, new.duration, now, new.incarnation)
        else:
            self._seen_own(new)
        self._wake.set()

    def refresh(self) -> None:
        """Recompute the members this replica acts with; tell ``on_change`` if they
        changed, or only their incarnations (then ``before`` equals ``after``)."""
        now = self._clock.now()
        others = {m for m in self._members.live(self._known_up_to(now)) if m != self.identity}
        view = frozenset(others | ({self.identity} if self._acting(now) else set()))
        if self.identity not in view:
            # Not acting: owns nothing, whoever else is live.
            view = frozenset()
        tokens = {m: self._members.incarnation(m) for m in view if m != self.identity}
        if view:
            tokens[self.identity] = self._incarnation
        if view == self._view and tokens == self._view_incarnations:
            return
        before, self._view, self._view_incarnations = self._view, view, tokens
        if before == view:
            log.info("shard member incarnations changed", members=sorted(view))
        else:
            log.info("shard members changed", before=sorted(before), after=sorted(view))
        self._on_change(before, view)

    def _lease_body(self) -> Obj:
        return member_lease(
            name=self.lease,
            namespace=self._leases.namespace,
            identity=self.identity,
            label=MEMBER_LABEL,
            duration=self._lease_seconds,
            now=self._clock.wall(),
            incarnation=self._incarnation,
        )
