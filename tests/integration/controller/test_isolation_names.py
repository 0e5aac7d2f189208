"""Names from tenants on the real servers (issue 20, finding 8): a manifest whose
object names hold an escape sequence and CR/LF, or a path ("../"), fails those
objects alone (``ApplyFailed``, not ``ClusterUnreachable``) while the good object
in the same resource is applied; the names reach the CRS conditions, its Events,
the binding and the controller's log escaped, never as raw control characters."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from typing import Any

from crs_controller.testbed import TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CRS_API,
    TIMEOUT,
    add_cluster,
    binding,
    binding_entry,
    condition,
    configmap_obj,
    crs_obj,
    manifests,
    source_configmap,
    unique,
    wait_object,
)

Obj = dict[str, Any]
BIDI = {chr(c) for c in [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]}


def unsafe(text: str) -> list[str]:
    """The control, line-separator and bidi characters in ``text``."""
    return [c for c in text if unicodedata.category(c) in ("Cc", "Zl", "Zp", "Cs") or c in BIDI]


def strings(value: Any) -> Iterator[str]:
    """Every string in a decoded JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def raw_in(value: Any) -> list[str]:
    return [s for s in strings(value) if unsafe(s)]


def log_lines_with_raw_characters(text: str) -> list[str]:
    """Log lines that carry a control character once decoded (JSON lines), or raw
    (anything else on the controller's output)."""
    found = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            entry = line
        if raw_in(entry):
            found.append(line)
    return found


def test_control_characters_in_object_names_fail_those_objects_alone_and_are_escaped(
    controller: ControllerProcess, mgmt: TestbedClient, workloads, workload_clients, namespace: str
) -> None:
    log_start = len(controller.log_text())
    marker = unique("names")
    good = f"good-{marker}"
    hostile = f"bad-{marker}\x1b[31m\r\nInjected: yes"
    escaped = f"bad-{marker}\\x1b[31m\\r\\nInjected: yes"
    climbing = f"../{marker}"
    objects = [configmap_obj(hostile), configmap_obj(climbing), configmap_obj(good)]
    mgmt.create(source_configmap(namespace, "named", {"objects.yaml": manifests(*objects)}))
    add_cluster(mgmt, workloads[1], namespace, "names", {"names": "1"})
    mgmt.create(crs_obj(namespace, "named", [("ConfigMap", "named")], {"names": "1"}))

    # The good object of the same resource is applied although the others fail.
    wait_object(workload_clients[1], "v1", "ConfigMap", good, "default")

    def failed_alone() -> tuple[Obj, Obj] | None:
        crs = mgmt.get(CRS_API, "ClusterResourceSet", "named", namespace) or {}
        entry = binding_entry(mgmt, namespace, "names", "named")
        done = (crs.get("status") or {}).get("failedClusters") == 1
        return (crs, entry) if done and entry and entry.get("outcome") else None

    crs, entry = wait_for(
        failed_alone, TIMEOUT, message="the cluster failed, with a binding outcome"
    )
    ready = condition(crs, "Ready")
    assert ready is not None
    assert ready["reason"] == "ApplyFailed", ready  # an object's failure, not the cluster's
    assert escaped in ready["message"], ready["message"]
    assert marker in ready["message"].split(escaped, 1)[1], "the ../ object is named too"
    assert [r["applied"] for r in entry["resources"]] == [False]
    assert entry["outcome"]["reason"] == "ApplyFailed"
    assert escaped in entry["outcome"]["message"]

    def warnings() -> list[Obj]:
        events = mgmt.list("v1", "Event", namespace)
        return [e for e in events if e["reason"] == "ApplyFailed" and marker in e["message"]]

    events = wait_for(warnings, TIMEOUT, message="an ApplyFailed Event naming the objects")
    assert any(escaped in e["message"] for e in events), [e["message"] for e in events]

    # Nothing anywhere carries the raw characters: conditions, Events, the binding.
    assert raw_in(crs.get("status")) == []
    assert raw_in(mgmt.list("v1", "Event", namespace)) == []
    assert raw_in(binding(mgmt, namespace, "names")) == []

    # The controller logged the failed apply of this CRS (the positive sign), and no
    # line it wrote since this test began carries a raw control character.
    key = f"{namespace}/named"
    wait_for(
        lambda: key in controller.log_text()[log_start:] or None,
        TIMEOUT,
        message="the controller's log of this CRS",
    )
    assert log_lines_with_raw_characters(controller.log_text()[log_start:]) == []

    # The cluster stays reachable: another CRS on it is applied as usual.
    later = f"later-{marker}"
    mgmt.create(source_configmap(namespace, "later", {"a": manifests(configmap_obj(later))}))
    mgmt.create(crs_obj(namespace, "later", [("ConfigMap", "later")], {"names": "1"}))
    wait_object(workload_clients[1], "v1", "ConfigMap", later, "default")
    # Otherwise it is retried with backoff for the rest of the session.
    mgmt.delete(CRS_API, "ClusterResourceSet", "named", namespace)
