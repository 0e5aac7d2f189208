"""The fleet page's pure parts and its server, without a network: the state of a
cluster for a CRS (as ``status`` says it), the rollout step a cluster is in, the view
folded from what the watches hold (cells by step, counts by state, a cluster holding
updates in no step, one waiting for its upgrade in its own; the header with what the
rollout waits for and the clusters it holds), folded off the event loop from a copy
the watches leave alone, what it parsed kept, a binding's record with its text
escaped, the changes between two views (applied to the first they give the second),
the address and the Host headers answered; then the ASGI app, asked with the run's
cookie (``test_dashboard_access`` asks without it): the page and its assets with a
Content-Security-Policy, refusals of another Host and of writes, the stream (a
snapshot, then deltas) and a follower too far behind dropped; and the page's files,
which name nothing from elsewhere and never hand API text to the HTML parser."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.app.commands import dashboard, status
from crs_controller.app.commands.common import UsageError
from crs_controller.app.commands.dashboard import address, hosts
from crs_controller.app.commands.status import BINDING_KIND, CRS_KIND, FleetState
from crs_controller.app.dashboard import server, view
from crs_controller.app.dashboard.access import Access
from crs_controller.app.dashboard.server import BACKLOG, Feed, asset, page_app
from crs_controller.core.api.models import API_VERSION, CRSBinding
from crs_controller.core.rollout.plan import Step, step_of
from crs_controller.core.state.fleet import cluster_state
from crs_controller.engine.reconcile.rollout import revision_of

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
HASH, OLD = "xxh3:00000000000000aa", "xxh3:00000000000000bb"
REVISION = revision_of({("ConfigMap", "addon"): HASH})
ACCESS = Access()
ACCESS.serve_on(8080)
SIGNED_IN = f"{ACCESS.cookie}={ACCESS.token}"


def entry(reason: str | None, ready: bool | None = None) -> CRSBinding | None:
    if reason is None:
        return None
    outcome: dict[str, Any] = {"reason": reason}
    if ready is not None:
        outcome["ready"] = ready
    return CRSBinding.model_validate({"clusterResourceSetName": "c", "outcome": outcome})


@pytest.mark.parametrize(
    ("reason", "ready", "current", "state"),
    [
        (None, None, None, "Pending"),
        ("Pending", None, None, "Pending"),
        ("Applied", None, True, "Ready"),
        ("Applied", None, None, "Ready"),
        ("Applied", None, False, "Progressing"),
        ("Applied", False, True, "Progressing"),
        ("Progressing", False, True, "Progressing"),  # as earlier releases recorded it
        ("Progressing", None, False, "Waiting"),  # held by its step
        ("OutsideWindow", None, False, "Waiting"),
        ("BudgetExhausted", None, False, "Waiting"),
        ("UpdateHeld", None, False, "Waiting"),
        ("UpgradeInProgress", None, False, "Waiting"),
        ("DependencyNotReady", None, None, "Waiting"),
        ("ClusterUnreachable", None, None, "Unreachable"),
        ("ApplyFailed", None, None, "Failed"),
        ("ValidationFailed", None, True, "Failed"),
    ],
)
def test_a_clusters_state_as_status_says_it(
    reason: str | None, ready: bool | None, current: bool | None, state: str
) -> None:
    assert cluster_state(entry(reason, ready), current) == state


STEPS = (
    Step({"matchLabels": {"ring": "canary"}}),
    Step({"matchExpressions": [{"key": "ring", "operator": "In", "values": ["canary", "prod"]}]}),
)


@pytest.mark.parametrize(
    ("labels", "step"),
    [({"ring": "canary"}, 1), ({"ring": "prod"}, 2), ({"ring": "dev"}, 3), ({}, 3)],
)
def test_a_cluster_is_in_the_first_step_that_selects_it(labels: dict[str, str], step: int) -> None:
    assert step_of(STEPS, labels) == step


def fleet() -> FleetState:
    steps = [
        {"clusterSelector": {"matchLabels": {"ring": "canary"}}},
        {"clusterSelector": {"matchLabels": {"ring": "prod"}}, "approval": "Manual"},
    ]
    crs = {
        "apiVersion": API_VERSION,
        "kind": CRS_KIND,
        "metadata": {"name": "cni", "namespace": "fleet"},
        "spec": {
            "clusterSelector": {"matchLabels": {"cni": "on"}},
            "resources": [{"kind": "ConfigMap", "name": "addon"}],
            "mode": "Reconcile",
            "rollout": {"steps": steps},
        },
        "status": {
            "revision": REVISION,
            "rollout": {
                "phase": "AwaitingApproval",
                "step": 2,
                "waitingFor": "Approval",
                "heldClusters": 1,
            },
        },
    }
    state = FleetState("fleet", {CRS_KIND: API_VERSION, BINDING_KIND: API_VERSION})
    state.apis["Cluster"] = "cluster.x-k8s.io/v1beta1"
    state.objects = {CRS_KIND: {("fleet", "cni"): crs}, "Cluster": {}, BINDING_KIND: {}}
    for name, ring, reason, digest, held in [
        ("a", "canary", "Applied", HASH, False),
        ("b", "prod", "Progressing", OLD, False),
        ("c", "prod", "ClusterUnreachable", OLD, False),
        ("d", "prod", "UpdateHeld", OLD, True),
    ]:
        meta: dict[str, Any] = {"name": name, "namespace": "fleet"}
        meta["labels"] = {"cni": "on", "ring": ring}
        if held:
            meta["annotations"] = {"addons.crs.dev/hold-updates": "true"}
        cluster = {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": meta}
        state.objects["Cluster"][("fleet", name)] = cluster
        resource = {"kind": "ConfigMap", "name": "addon", "hash": digest, "applied": True}
        outcome = {"reason": reason, "message": f"<b>{name}</b>"}
        recorded = {"clusterResourceSetName": "cni", "resources": [resource], "outcome": outcome}
        state.objects[BINDING_KIND][("fleet", name)] = {
            "apiVersion": API_VERSION,
            "kind": BINDING_KIND,
            "metadata": {"name": name, "namespace": "fleet"},
            "spec": {"clusterName": name, "bindings": [recorded]},
        }
    return state


def test_the_view_puts_each_cluster_in_its_step_with_its_state() -> None:
    built = view.build(fleet(), NOW)
    cells = {key: (c["state"], c["reason"], c["step"]) for key, c in built["cells"].items()}
    assert cells == {
        "fleet/cni/a": ("Ready", "Applied", 1),
        "fleet/cni/b": ("Waiting", "Progressing", 2),
        "fleet/cni/c": ("Unreachable", "ClusterUnreachable", 2),
        "fleet/cni/d": ("Waiting", "UpdateHeld", 0),  # holds updates: in no step
    }
    header = built["crs"]["fleet/cni"]
    assert header["counts"] == {"Ready": 1, "Unreachable": 1, "Waiting": 2}
    assert (header["phase"], header["step"], header["steps"]) == ("AwaitingApproval", 2, 2)
    assert header["waiting"] == "approval"
    assert header["held"] == 1
    assert built["clusters"]["fleet/d"]["holdsUpdates"] is True
    assert built["cells"]["fleet/cni/a"]["message"] == "<b>a</b>"  # as text, for textContent


def with_rollout(state: FleetState, **rollout: Any) -> FleetState:
    """``state`` with the CRS's rollout status as given."""
    state.objects[CRS_KIND][("fleet", "cni")]["status"]["rollout"] = rollout
    return state


@pytest.mark.parametrize(
    ("rollout", "shown"),
    [
        ({"waitingFor": "Window", "nextWindow": "2026-01-01T22:00:00Z"}, "window until 22:00Z"),
        (
            {"waitingFor": "Window", "nextWindow": "2026-01-03T08:30:00Z"},
            "window until 2026-01-03T08:30Z",
        ),
        ({"waitingFor": "Budget"}, "budget"),
        ({"waitingFor": "Validation"}, "validation"),
        ({"waitingFor": "Approval"}, "approval"),
        ({}, "-"),
    ],
)
def test_what_the_rollout_waits_for_is_in_its_header_as_the_page_shows_it(
    rollout: dict[str, str], shown: str
) -> None:
    state = with_rollout(fleet(), phase="Paused", step=2, heldClusters=3, **rollout)
    header = view.build(state, NOW)["crs"]["fleet/cni"]
    assert header["waiting"] == shown
    assert header["nextWindow"] == rollout.get("nextWindow")
    assert (header["phase"], header["step"], header["held"]) == ("Paused", 2, 3)


def test_a_cluster_waiting_for_its_upgrade_keeps_its_step() -> None:
    state = fleet()
    raw = state.objects[BINDING_KIND][("fleet", "b")]
    raw["spec"]["bindings"][0]["outcome"] = {"reason": "UpgradeInProgress", "message": "1.34"}
    cell = view.build(state, NOW)["cells"]["fleet/cni/b"]
    assert (cell["state"], cell["reason"], cell["step"]) == ("Waiting", "UpgradeInProgress", 2)
    assert cell["current"] is False


def test_the_record_is_the_bindings_entry_for_that_crs() -> None:
    state = fleet()
    found = view.record(state, "fleet", "b", "cni")
    assert found is not None
    assert found["outcome"]["reason"] == "Progressing"
    assert found["resources"][0]["hash"] == OLD
    assert view.record(state, "fleet", "b", "other") is None
    assert view.record(state, "fleet", "nowhere", "cni") is None


def test_the_records_text_is_escaped_as_status_escapes_it() -> None:
    state = fleet()
    entry = state.objects[BINDING_KIND][("fleet", "b")]["spec"]["bindings"][0]
    entry["outcome"]["message"] = "rm \u202eftxt.exe \x1b[2J<b>x</b>"
    entry["validation"] = {
        "revision": REVISION,
        "step": 2,
        "phase": "Failed",
        "started": "2026-01-01T11:00:00Z",
        "finished": "2026-01-01T11:05:00Z",
        "message": "probe \x1b]0;title\x07 said \u202eno",
    }
    found = view.record(state, "fleet", "b", "cni")
    assert found is not None
    assert found["outcome"]["message"] == "rm \\u202eftxt.exe \\x1b[2J<b>x</b>"
    assert found["validation"]["message"] == "probe \\x1b]0;title\\x07 said \\u202eno"
    assert found["validation"]["phase"] == "Failed"
    text = json.dumps(found, ensure_ascii=False)
    assert "\u202e" not in text
    assert "\x1b" not in text


def test_a_binding_seen_again_is_folded_again() -> None:
    state = fleet()
    before = view.build(state, NOW)
    raw = json.loads(json.dumps(state.objects[BINDING_KIND][("fleet", "b")]))
    raw["spec"]["bindings"][0]["outcome"] = {"reason": "Applied"}
    raw["spec"]["bindings"][0]["resources"][0]["hash"] = HASH
    state.seen(BINDING_KIND, "MODIFIED", raw)
    delta = view.changes(before, view.build(state, NOW))
    assert delta is not None
    assert set(delta["cells"]["set"]) == {"fleet/cni/b"}
    assert delta["cells"]["set"]["fleet/cni/b"]["state"] == "Ready"
    assert delta["crs"]["set"]["fleet/cni"]["counts"]["Ready"] == 2
    assert "clusters" not in delta


async def test_the_view_is_folded_off_the_loop_from_a_copy_of_the_fleet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The page and its streams are served on the loop while the fleet is folded."""
    state, build = fleet(), view.build
    folds: list[tuple[bool, bool]] = []

    def fold(held: FleetState, now: datetime) -> view.View:
        folds.append((threading.current_thread() is threading.main_thread(), held is state))
        return build(held, now)

    monkeypatch.setattr(view, "build", fold)
    feed = Feed()
    # No source follows the Kubernetes version: nothing is read.
    await dashboard._refresh(None, state, feed)  # type: ignore[arg-type]
    assert folds == [(False, False)]
    assert feed.view == build(fleet(), NOW)


def test_what_a_copy_parsed_is_kept_for_the_objects_still_as_they_were(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = fleet()
    held = state.copy()
    raw = json.loads(json.dumps(state.objects[BINDING_KIND][("fleet", "b")]))
    raw["spec"]["bindings"][0]["outcome"] = {"reason": "Applied"}
    state.seen(BINDING_KIND, "MODIFIED", raw)  # the watches go on during the fold
    state.seen("Cluster", "DELETED", state.objects["Cluster"][("fleet", "c")])
    folded = view.build(held, NOW)
    assert "fleet/c" in folded["clusters"]
    assert folded["cells"]["fleet/cni/b"]["reason"] == "Progressing"
    state.keep_parsed(held)
    parsed: list[Any] = []
    for name in ("parse_crs", "parse_cluster", "parse_binding_object"):
        parse = getattr(status, name)
        monkeypatch.setattr(status, name, lambda raw, parse=parse: parsed.append(raw) or parse(raw))
    after = view.build(state, NOW)
    assert parsed == [raw]  # only what changed since the copy is parsed again
    assert "fleet/c" not in after["clusters"]
    assert after["cells"]["fleet/cni/b"]["reason"] == "Applied"


entries = st.dictionaries(st.text(max_size=3), st.dictionaries(st.text(max_size=2), st.integers()))
views = st.fixed_dictionaries({part: entries for part in view.PARTS})


@given(views, views)
def test_the_changes_applied_to_the_first_view_give_the_second(
    before: view.View, after: view.View
) -> None:
    delta = view.changes(before, after)
    if delta is None:
        assert before == after
        return
    for part, change in delta.items():
        for key in change["removed"]:
            del before[part][key]
        before[part].update(change["set"])
    assert before == after


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("[::1]:9000", ("::1", 9000)),
        ("localhost:80", ("localhost", 80)),
    ],
)
def test_an_address_is_host_and_port(text: str, expected: tuple[str, int]) -> None:
    assert address(text) == expected


@pytest.mark.parametrize("text", ["8080", ":8080", "host:", "host:http", "host:70000"])
def test_an_address_without_host_or_port_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match="HOST:PORT"):
        address(text)


def test_the_host_headers_answered_are_the_address_and_its_loopback_names() -> None:
    assert hosts("127.0.0.1", 8080) == {
        "127.0.0.1:8080",
        "localhost:8080",
        "[::1]:8080",
    }
    assert hosts("10.0.0.5", 80) == {"10.0.0.5:80"}
    assert hosts("::1", 80) == {"[::1]:80", "127.0.0.1:80", "localhost:80"}


class Exchange:
    """One request to the ASGI app, its answer collected."""

    def __init__(
        self,
        path: str,
        method: str = "GET",
        host: str = "127.0.0.1:8080",
        cookie: str | None = SIGNED_IN,
    ) -> None:
        query = path.partition("?")[2].encode()
        headers = [(b"host", host.encode())]
        if cookie is not None:
            headers.append((b"cookie", cookie.encode()))
        self.scope: Any = {
            "type": "http",
            "method": method,
            "path": path.partition("?")[0],
            "query_string": query,
            "headers": headers,
        }
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.body = b""
        self.gone = asyncio.Event()
        self.sent = asyncio.Event()

    async def until(self, text: bytes, after: bytes = b"") -> None:
        """Until the body sent so far holds ``text`` (after ``after``)."""
        while text not in (self.body.partition(after)[2] if after else self.body):
            self.sent.clear()
            await self.sent.wait()

    async def receive(self) -> Any:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = dict(message["headers"])
        else:
            self.body += message.get("body", b"")
        self.sent.set()


def asked(namespace: str, cluster: str, crs: str) -> dict[str, Any]:
    """A record that names what it was asked for."""
    return {"asked": [namespace, cluster, crs]}


async def ask(feed: Feed, path: str, **how: str | None) -> Exchange:
    app = page_app(feed, asked, {"127.0.0.1:8080"}, ACCESS)
    exchange = Exchange(path, **how)
    exchange.gone.set()
    await app(exchange.scope, exchange.receive, exchange.send)
    return exchange


async def test_the_page_and_its_assets_carry_the_policy() -> None:
    for path in ("/", "/app.js", "/style.css"):
        answer = await ask(Feed(), path)
        assert answer.status == 200
        policy = answer.headers[b"content-security-policy"].decode()
        assert "script-src 'self'" in policy
        assert "default-src 'none'" in policy
        assert "unsafe" not in policy
        assert answer.headers[b"x-content-type-options"] == b"nosniff"
    assert (await ask(Feed(), "/")).body == asset("index.html")


async def test_another_host_a_write_and_an_unknown_path_are_refused() -> None:
    assert (await ask(Feed(), "/", host="evil.example:8080")).status == 403
    assert (await ask(Feed(), "/", method="POST")).status == 405
    assert (await ask(Feed(), "/nothing")).status == 404
    assert (await ask(Feed(), "/record?namespace=a&cluster=b")).status == 404
    found = await ask(Feed(), "/record?namespace=a&cluster=b&crs=c")
    assert json.loads(found.body) == {"asked": ["a", "b", "c"]}


async def test_the_stream_sends_a_snapshot_then_each_change() -> None:
    feed = Feed()
    state = fleet()
    feed.publish(view.build(state, NOW))
    app = page_app(feed, lambda *_: None, {"127.0.0.1:8080"}, ACCESS)
    exchange = Exchange("/events")
    streaming = asyncio.create_task(app(exchange.scope, exchange.receive, exchange.send))
    await exchange.until(b"\n\n")
    assert exchange.headers[b"content-type"] == b"text/event-stream"
    name, data = exchange.body.decode().split("\n")[:2]
    assert name == "event: snapshot"
    assert set(json.loads(data.removeprefix("data: "))["cells"]) == {
        f"fleet/cni/{c}" for c in "abcd"
    }
    del state.objects["Cluster"][("fleet", "a")]
    del state.objects[BINDING_KIND][("fleet", "a")]
    feed.publish(view.build(state, NOW))
    await exchange.until(b"event: delta")
    await exchange.until(b"\n\n", after=b"event: delta")
    delta = json.loads(exchange.body.decode().rstrip().split("\n")[-1].removeprefix("data: "))
    assert delta["cells"]["removed"] == ["fleet/cni/a"]
    exchange.gone.set()
    await streaming
    assert feed.followers == set()


def test_a_follower_too_far_behind_is_dropped() -> None:
    feed = Feed()
    _, queue = feed.follow()
    for n in range(BACKLOG + 2):
        feed.publish({"crs": {"x": {"n": n}}, "cells": {}, "clusters": {}})
    assert feed.followers == set()
    assert queue.qsize() == 1
    assert queue.get_nowait() is None  # its stream ends; the page starts again


@pytest.mark.parametrize("name", ["index.html", "style.css", "app.js"])
def test_the_page_names_nothing_from_elsewhere(name: str) -> None:
    text = asset(name).decode()
    assert "://" not in text
    assert re.search(r"""(src|href)=["']//|url\(\s*["']?//|@import""", text) is None


def test_the_script_never_hands_text_to_the_html_parser() -> None:
    script = asset("app.js").decode()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script
    assert re.search(r"new Function|setTimeout\(\s*['\"]", script) is None
    page = asset("index.html").decode()
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/app.js" defer>']
    assert "style=" not in page
    assert server.CSP.count("'self'") >= 2
