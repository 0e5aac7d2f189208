"""Notifications on real servers (``run --notify-url``), to receivers that are HTTP
servers in threads of the test: a health check that fails halts a rollout and exactly
one ``RolloutHalted`` CloudEvent arrives, with the contract's attributes and data and
the operator's bearer token; a receiver that never answers holds back neither another
receiver nor another team's edit, which is applied while that receiver still hangs
(its delivery neither answered nor given up yet); a validation whose object from a
Secret the server refuses, quoting a value of that Secret, fails and is told without
the value, plain or base64, in any POST.

The session's controller is stopped meanwhile (two controllers would each write the
status and each notify), and started again afterwards. The test's controller watches
the test's namespace only: with one worker, every other test's leftovers would come
first, so both teams' sets live in that namespace.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CRS_API,
    TIMEOUT,
    add_cluster,
    configmap_obj,
    crs_obj,
    crs_status,
    deployment,
    manifests,
    metric,
    reconciles,
    source_configmap,
    source_secret,
    unique,
    until_no_conflict,
    wait_condition,
    wait_rollout,
)

TOKEN = "notify-token-for-tests"


class Receiver:
    """An HTTP receiver in a thread: records each POST (headers and JSON body), then
    answers 200, or, with ``hang``, never answers until closed."""

    def __init__(self, *, hang: bool = False) -> None:
        self.posts: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.raw: list[bytes] = []  # each POST's body as it came
        self.answered = 0
        self._release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                receiver.raw.append(raw)
                body = json.loads(raw)
                receiver.posts.append(({k.lower(): v for k, v in self.headers.items()}, body))
                if hang:
                    receiver._release.wait()
                    return
                self.send_response(200)
                self.end_headers()
                receiver.answered += 1

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def about(self, subject: str, kind: str | None = None) -> list[dict[str, Any]]:
        """The bodies received for ``subject`` (of CloudEvents type ``kind``)."""
        return [
            body
            for _, body in list(self.posts)
            if body.get("subject") == subject and kind in (None, body.get("type"))
        ]

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def notifying(
    controller: ControllerProcess, tmp_path: Path, namespace: str
) -> Iterator[Callable[..., ControllerProcess]]:
    """Start a controller that notifies the given receivers, in place of the session's,
    for ``namespace`` only (one worker: a POST made in a reconcile would hold every
    other one)."""
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    started: list[ControllerProcess] = []

    def start(*receivers: Receiver) -> ControllerProcess:
        urls = [arg for r in receivers for arg in ("--notify-url", r.url)]
        args = ("--concurrency", "1", "--log-level", "debug", "--notify-token-file", str(token))
        process = ControllerProcess(controller.management, *args, *urls, "--namespace", namespace)
        started.append(process)
        process.start()
        return process

    controller.stop()
    try:
        yield start
    finally:
        for process in started:
            process.close()
        controller.start()


@contextmanager
def receivers(*hangs: bool) -> Iterator[list[Receiver]]:
    made = [Receiver(hang=hang) for hang in hangs]
    try:
        yield made
    finally:
        for receiver in made:
            receiver.close()


def edit(mgmt: TestbedClient, namespace: str, name: str, *objects: dict[str, Any]) -> None:
    def change() -> None:
        source = mgmt.get("v1", "ConfigMap", name, namespace)
        source["data"] = {"a": manifests(*objects)}
        mgmt.update(source)

    until_no_conflict(change)


def events(mgmt: TestbedClient, namespace: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in mgmt.list("v1", "Event", namespace) if e["reason"] == reason]


def notifications(process: ControllerProcess, result: str) -> float:
    text = httpx.get(process.url("/metrics"), timeout=5).text
    return metric(text, f'crs_notifications_total{{result="{result}"}}')


def test_a_halted_rollout_is_told_once_as_a_cloudevent(
    notifying: Callable[..., ControllerProcess],
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    namespace: str,
) -> None:
    with receivers(False) as (receiver,):
        process = notifying(receiver)
        marker, bad = unique("told"), unique("never")
        good = configmap_obj(marker, v="1")
        mgmt.create(source_configmap(namespace, "halt", {"a": manifests(good)}))
        labels = {"told": namespace[-6:]}
        crs = crs_obj(namespace, "halt", [("ConfigMap", "halt")], labels, mode="Reconcile")
        crs["spec"]["healthCheck"] = {"wait": True, "timeout": "3s"}
        crs["spec"]["rollout"] = {
            "maxConcurrent": 1,
            "steps": [{"clusterSelector": {"matchLabels": {"ring": "canary"}}}],
        }
        mgmt.create(crs)
        for index, name in enumerate(["h1", "h2", "h3"]):
            ring = "canary" if name == "h1" else "rest"
            workload = control_plane.workloads[index % len(control_plane.workloads)]
            add_cluster(mgmt, workload, namespace, name, {**labels, "ring": ring})
        wait_condition(mgmt, namespace, "halt", "Ready", "True", "Applied")
        before = crs_status(mgmt, namespace, "halt")["revision"]

        # A Deployment that never becomes available (the test bed runs no controllers).
        edit(mgmt, namespace, "halt", good, deployment(bad))
        wait_rollout(mgmt, namespace, "halt", after=before, phase="Halted")
        subject, kind = f"{namespace}/halt", "dev.crs.rollouthalted"
        (event,) = wait_for(lambda: receiver.about(subject, kind), TIMEOUT, message="the POST")
        (told,) = wait_for(lambda: events(mgmt, namespace, "RolloutHalted"), TIMEOUT)

        assert event["specversion"] == "1.0"
        assert event["source"] == "crs-controller"
        assert event["id"] and event["time"].endswith("Z")
        assert event["datacontenttype"] == "application/json"
        assert event["data"] == {
            "reason": "RolloutHalted",
            "crs": "halt",
            "namespace": namespace,
            "revision": crs_status(mgmt, namespace, "halt")["revision"],
            "message": told["message"],
            "clusters": ["h1"],
            "clustersOmitted": 0,
        }
        assert event["data"]["revision"] != before
        headers = next(h for h, b in receiver.posts if b is event)
        assert headers["content-type"].startswith("application/cloudevents+json")
        assert headers["authorization"] == f"Bearer {TOKEN}"

        # Once: the CRS is looked at again (its metadata changed) and tells nothing more.
        looked = reconciles(process, "crs", subject)

        def annotate() -> None:
            current = mgmt.get(CRS_API, "ClusterResourceSet", "halt", namespace)
            current["metadata"].setdefault("annotations", {})["looked"] = "again"
            mgmt.update(current)

        until_no_conflict(annotate)
        wait_for(lambda: reconciles(process, "crs", subject) > looked, TIMEOUT)
        assert len(receiver.about(subject, kind)) == 1
        assert len(events(mgmt, namespace, "RolloutHalted")) == 1
        assert notifications(process, "sent") >= 1


def test_a_receiver_that_never_answers_holds_back_no_other_set(
    notifying: Callable[..., ControllerProcess],
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients: list[TestbedClient],
    namespace: str,
) -> None:
    other = namespace  # the test's controller watches this namespace only
    with receivers(True, False) as (hanging, answering):
        process = notifying(hanging, answering)
        workload = control_plane.workloads[0]
        # The other team: a set whose edits should go out as always.
        theirs = unique("theirs")
        mgmt.create(source_configmap(other, "b", {"a": manifests(configmap_obj(theirs, v="1"))}))
        add_cluster(mgmt, workload, other, "b1", {"tenant": "b"})
        mgmt.create(crs_obj(other, "b", [("ConfigMap", "b")], {"tenant": "b"}, "Reconcile"))
        wait_condition(mgmt, other, "b", "Ready", "True", "Applied")

        # This team: a rollout whose progress is told to both receivers (its first
        # install completing, or at the latest the edit's rollout completing).
        mine = unique("mine")
        mgmt.create(source_configmap(namespace, "a", {"a": manifests(configmap_obj(mine, v="1"))}))
        add_cluster(mgmt, workload, namespace, "a1", {"tenant": "a"})
        crs = crs_obj(namespace, "a", [("ConfigMap", "a")], {"tenant": "a"}, "Reconcile")
        crs["spec"]["rollout"] = {"maxConcurrent": 1, "steps": []}
        mgmt.create(crs)
        wait_condition(mgmt, namespace, "a", "Ready", "True", "Applied")
        edit(mgmt, namespace, "a", configmap_obj(mine, v="2"))
        # The positive sign: the hanging receiver holds a POST; the other has it. The
        # other team's edit follows at once: the hanging delivery is far from
        # given up (that takes four attempts of 10 s each, and the waits between).
        subject = f"{namespace}/a"
        wait_for(lambda: hanging.about(subject), TIMEOUT, message="the hanging POST")
        wait_for(lambda: answering.about(subject), TIMEOUT, message="the answered POST")

        edit(mgmt, other, "b", configmap_obj(theirs, v="2"))
        client = workload_clients[0]

        def applied() -> bool:
            found = client.get("v1", "ConfigMap", theirs, "default")
            return found is not None and found.get("data", {}).get("v") == "2"

        wait_for(applied, TIMEOUT, message="the other team's edit")
        # Applied while the delivery to the hanging receiver is still under way: never
        # answered, and not given up yet.
        assert hanging.answered == 0
        assert notifications(process, "failed") == 0
    mgmt.delete(CRS_API, "ClusterResourceSet", "b", other)


def test_a_value_from_a_secret_is_in_no_notification(
    notifying: Callable[..., ControllerProcess],
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    namespace: str,
) -> None:
    """A step's validation objects come from a Secret, and the server refuses one,
    its message quoting a value of that Secret (an invalid label): the validation
    times out on that refusal, which ValidationFailed tells, without the value."""
    value = unique("s3cr3t")
    with receivers(False) as (receiver,):
        notifying(receiver)
        refused = configmap_obj(unique("refused"), token=value)
        refused["metadata"]["labels"] = {"tier": f"{value}!!not-a-label"}
        mgmt.create(source_secret(namespace, "checks", {"a": manifests(refused)}))
        app = manifests(configmap_obj(unique("app"), v="1"))
        mgmt.create(source_configmap(namespace, "sealed", {"a": app}))
        labels = {"sealed": namespace[-6:]}
        crs = crs_obj(namespace, "sealed", [("ConfigMap", "sealed")], labels, mode="Reconcile")
        validation = {"resources": [{"kind": "Secret", "name": "checks"}], "timeout": "3s"}
        crs["spec"]["rollout"] = {
            "steps": [{"clusterSelector": {"matchLabels": labels}, "validation": validation}]
        }
        mgmt.create(crs)
        add_cluster(mgmt, control_plane.workloads[0], namespace, "s1", labels)
        subject, kind = f"{namespace}/sealed", "dev.crs.validationfailed"
        (told,) = wait_for(lambda: receiver.about(subject, kind), TIMEOUT, message="the POST")
        # The refusal is what it tells, by field and reason.
        assert "metadata.labels" in told["data"]["message"], told

    secret = mgmt.get("v1", "Secret", "checks", namespace)
    forbidden = [value, base64.b64encode(value.encode()).decode(), secret["data"]["a"]]
    assert receiver.raw
    for raw in receiver.raw:
        assert not [f for f in forbidden if f in raw.decode()], raw
    mgmt.delete(CRS_API, "ClusterResourceSet", "sealed", namespace)
