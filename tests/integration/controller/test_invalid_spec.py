"""A ClusterResourceSet the controller's model refuses — stored through a looser CRD
schema, as after a CRD downgrade or a hand-edited schema — gets ``InvalidSpec`` on its
own status, naming the field and not the value, while another CRS on the same cluster
converges as usual. A spec the CRD takes and the model refuses (a change window's
schedule that is no cron) is told by one Warning Event per distinct problem, and
``crs-controller status`` shows why in ``-o wide`` and ``-o yaml``."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from crs_controller.app.cli import main
from crs_controller.testbed import ControlPlane, KubeError, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CRS_API,
    TIMEOUT,
    add_cluster,
    admin_kubeconfig,
    configmap_obj,
    crs_obj,
    manifests,
    reconciles,
    source_configmap,
    unique,
    until_no_conflict,
    wait_condition,
    wait_object,
)

CRD = "clusterresourcesets.addons.crs.dev"
BAD_HOUR = "spec.rollout.windows[0]: schedule: Bad hour"
CRD_API = "apiextensions.k8s.io/v1"


@pytest.fixture
def loose_mode(mgmt: TestbedClient) -> Iterator[None]:
    """The CRS CRD without the enum on spec.mode, restored afterwards."""
    original = mgmt.get(CRD_API, "CustomResourceDefinition", CRD)
    assert original is not None
    loose = copy.deepcopy(original)
    for version in loose["spec"]["versions"]:
        mode = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["mode"]
        mode.pop("enum", None)
    mgmt.update(loose)
    yield
    current = mgmt.get(CRD_API, "CustomResourceDefinition", CRD)
    assert current is not None
    original["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    mgmt.update(original)


def test_a_crs_the_model_refuses_is_invalid_alone(
    controller: ControllerProcess,
    mgmt: TestbedClient,
    workloads,
    workload_clients,
    namespace: str,
    loose_mode: None,
) -> None:
    good, bad = unique("good"), unique("bad")
    mgmt.create(source_configmap(namespace, "good", {"a": manifests(configmap_obj(good))}))
    mgmt.create(source_configmap(namespace, "bad", {"a": manifests(configmap_obj(bad))}))
    marker = "Sometimes" + unique("x")
    invalid = crs_obj(namespace, "bad", [("ConfigMap", "bad")], {"iv": "1"}, mode=marker)

    def create_invalid() -> dict[str, Any] | None:
        try:  # the looser schema takes a moment to be served
            return mgmt.create(invalid)
        except KubeError as exc:
            if exc.status != 422:
                raise
            return None

    wait_for(create_invalid, TIMEOUT, message="CRS created through the looser schema")
    mgmt.create(crs_obj(namespace, "good", [("ConfigMap", "good")], {"iv": "1"}))
    add_cluster(mgmt, workloads[2], namespace, "iv1", {"iv": "1"})

    cond = wait_condition(mgmt, namespace, "bad", "Ready", "False", "InvalidSpec")
    assert "spec.mode" in cond["message"], cond["message"]
    assert marker not in cond["message"]
    wait_condition(mgmt, namespace, "good", "Ready", "True", "Applied")
    wait_object(workload_clients[2], "v1", "ConfigMap", good, "default")
    assert workload_clients[2].get("v1", "ConfigMap", bad, "default") is None


def _invalid_events(mgmt: TestbedClient, namespace: str, crs: str) -> list[dict[str, Any]]:
    return [
        e
        for e in mgmt.list("v1", "Event", namespace)
        if e["reason"] == "InvalidSpec" and e["involvedObject"]["name"] == crs
    ]


def _told(mgmt: TestbedClient, namespace: str, crs: str, count: int) -> list[Any] | None:
    """The InvalidSpec Events of ``crs`` once there are at least ``count``."""
    events = _invalid_events(mgmt, namespace, crs)
    return events if len(events) >= count else None


def _edit(mgmt: TestbedClient, namespace: str, name: str, change: Any) -> None:
    def edit() -> None:
        crs = mgmt.get(CRS_API, "ClusterResourceSet", name, namespace)
        assert crs is not None
        change(crs)
        mgmt.update(crs)

    until_no_conflict(edit)


def _schedule(schedule: str) -> Any:
    def change(crs: dict[str, Any]) -> None:
        crs["spec"]["rollout"]["windows"][0]["schedule"] = schedule

    return change


def _status_shows(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    """``crs-controller status`` shows the refused spec's problem in -o yaml and wide."""
    assert main([*args, "-o", "yaml"]) == 0
    (shown,) = yaml.safe_load(capsys.readouterr().out)["clusterResourceSets"]
    assert (shown["reason"], shown["message"]) == ("InvalidSpec", BAD_HOUR), shown
    assert main([*args, "-o", "wide"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert row[header.index("STATE") :].split()[0] == "InvalidSpec", row
    assert row.endswith(BAD_HOUR), row


def test_an_invalid_spec_is_told_once_per_problem_and_shown_by_status(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    mgmt.create(source_configmap(namespace, "w", {"a": manifests(configmap_obj(unique("w")))}))
    crs = crs_obj(namespace, "windowed", [("ConfigMap", "w")], {"iv": "2"}, mode="Reconcile")
    window = {"kind": "Allow", "schedule": "0 22 * * *", "duration": "2h"}
    crs["spec"]["rollout"] = {"windows": [window]}
    mgmt.create(crs)
    add_cluster(mgmt, workloads[0], namespace, "iv2", {"iv": "2"})
    wait_condition(mgmt, namespace, "windowed", "Ready", "True", "Applied")

    # The CRD takes any string as a schedule; the controller finds no hour 99.
    _edit(mgmt, namespace, "windowed", _schedule("0 99 * * *"))
    cond = wait_condition(mgmt, namespace, "windowed", "Ready", "False", "InvalidSpec")
    assert cond["message"] == BAD_HOUR, cond
    (told,) = wait_for(lambda: _told(mgmt, namespace, "windowed", 1), TIMEOUT)
    assert (told["type"], told["message"]) == ("Warning", BAD_HOUR), told

    args = ["status", "windowed", "-n", namespace]
    _status_shows(capsys, [*args, "--kubeconfig", admin_kubeconfig(control_plane, tmp_path)])

    # Looked at again with the same problem: no second Event.
    key, looked = f"{namespace}/windowed", reconciles(controller, "crs", f"{namespace}/windowed")
    _edit(mgmt, namespace, "windowed", lambda c: c["metadata"].update(labels={"looked": "1"}))
    wait_for(lambda: reconciles(controller, "crs", key) > looked, TIMEOUT, message="a look")
    assert len(_invalid_events(mgmt, namespace, "windowed")) == 1

    # Another problem is told.
    _edit(mgmt, namespace, "windowed", _schedule("99 0 * * *"))
    events = wait_for(lambda: _told(mgmt, namespace, "windowed", 2), TIMEOUT)
    assert sorted(e["message"] for e in events) == [
        BAD_HOUR,
        "spec.rollout.windows[0]: schedule: Bad minute",
    ]


# --- what the API server refuses itself ---------------------------------------------


def _server_answer(mgmt: TestbedClient, namespace: str, spec: dict[str, Any]) -> tuple[int, str]:
    """The API server's status code and message for a CRS with ``spec`` added (a dry
    run: nothing stored)."""
    crs = crs_obj(namespace, unique("spec"), [("ConfigMap", "any")], {"iv": "1"})
    crs["spec"].update(spec)
    response = mgmt.http.request(
        "POST",
        mgmt.path(CRS_API, "ClusterResourceSet", namespace=namespace),
        json=crs,
        params={"dryRun": "All"},
    )
    return response.status_code, response.text


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"mode": "Reconcile", "reapplyInterval": "1ns"}, "reapplyInterval must be 0 or at least"),
        ({"mode": "Reconcile", "reapplyInterval": "9.5s"}, "reapplyInterval must be 0 or at least"),
        ({"driftCheckInterval": "1ns"}, "driftCheckInterval must be 0 or at least 10s"),
        ({"reapplyInterval": "10m"}, "reapplyInterval requires mode: Reconcile"),
        ({"driftDetection": "Content"}, "driftDetection other than None requires mode: Reconcile"),
    ],
)
def test_the_api_server_refuses_a_spinning_interval_and_drift_outside_reconcile(
    mgmt: TestbedClient, namespace: str, spec: dict[str, Any], message: str
) -> None:
    status, text = _server_answer(mgmt, namespace, spec)
    assert status == 422 and message in text, text


@pytest.mark.parametrize(
    "spec",
    [
        {"mode": "Reconcile", "reapplyInterval": "10s", "driftCheckInterval": "10s"},
        {"mode": "Reconcile", "reapplyInterval": "0", "driftCheckInterval": "0s"},
        {"mode": "Reconcile", "reapplyInterval": "1h30m", "driftDetection": "Generation"},
        {"driftCheckInterval": "1.5m"},
    ],
)
def test_the_api_server_takes_intervals_of_10s_and_more_or_0(
    mgmt: TestbedClient, namespace: str, spec: dict[str, Any]
) -> None:
    status, text = _server_answer(mgmt, namespace, spec)
    assert status == 201, text
