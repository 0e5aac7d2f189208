"""What both benchmark phases share: the add-on, the process figures, the audit
counts and the measuring sequence itself, so crs-controller and Cluster API's
manager are timed by exactly the same code.
"""

from __future__ import annotations

import functools
import os
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import yaml

from crs_controller.testbed import ControlPlane, KubeClient, KubeError, wait_for

REPO = Path(__file__).resolve().parents[2]
ADDONS = REPO.parent / "shared" / "data" / "addons"
WRITES = {"create", "update", "patch", "delete", "deletecollection"}
TIMEOUT = 1800.0

Figures = dict[str, Any]


class Controller(Protocol):
    """A controller process the benchmark starts, measures and stops."""

    @property
    def pid(self) -> int | None: ...

    def start(self) -> None: ...

    def stop(self) -> int | None: ...


def addon(version: str) -> str:
    """kindnet when the shared data is there, else a small synthetic add-on."""
    path = ADDONS / "kindnet.yaml"
    if path.exists():
        text = path.read_text()
    else:
        docs = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench-addon"}},
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "agent", "namespace": "bench-addon"},
            },
        ]
        text = yaml.safe_dump_all(docs)
    marker = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "bench-version", "namespace": "default"},
        "data": {"version": version},
    }
    return text + "\n---\n" + yaml.safe_dump(marker)


def objects_in(text: str) -> int:
    return len([d for d in yaml.safe_load_all(text) if d])


def _crd_paths(files: Iterable[Path]) -> list[str]:
    """The list path of every CRD's resource in ``files`` (at its storage version)."""
    out = []
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                spec = doc["spec"]
                version = next(v["name"] for v in spec["versions"] if v.get("storage"))
                out.append(f"/apis/{spec['group']}/{version}/{spec['names']['plural']}")
    return out


def _serves(mgmt: KubeClient, path: str) -> bool:
    return mgmt.http.get(path).status_code == 200


def warm_up(mgmt: KubeClient, files: Iterable[Path]) -> None:
    """List every CRD's resource until the server answers.

    The API server builds a resource's watch cache on its first use and answers 429
    "storage is (re)initializing" until it is ready (about a second); a controller
    started on freshly installed CRDs would pay that in back-off, which a real
    management cluster never charges. Done right after the CRDs are installed, when
    the lists are empty.
    """
    for path in _crd_paths(files):
        wait_for(functools.partial(_serves, mgmt, path), 60, interval=0.1, message=f"{path} served")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _received(event: dict[str, Any]) -> float:
    stamp = event["requestReceivedTimestamp"].replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


def _resource(event: dict[str, Any]) -> str:
    ref = event.get("objectRef") or {}
    name = str(ref.get("resource", "?"))
    return f"{name}/{ref['subresource']}" if ref.get("subresource") else name


Event = dict[str, Any]


def _events(plane: ControlPlane, since: float) -> list[tuple[bool, Event]]:
    """Every server's audit events since ``since``, each with "on the management server"."""
    return [
        (server is plane.management, event)
        for server in plane.servers
        for event in server.audit_events()
        if _received(event) >= since
    ]


def _tally(events: Iterable[tuple[bool, Event]], mine: Callable[[Event], bool]) -> Figures:
    """Management writes (also by resource), workload writes and workload reads."""
    counts: Figures = {"management": 0, "workloads": 0, "workload_reads": 0}
    by_resource: Counter[str] = Counter()
    for management, event in events:
        if not mine(event):
            continue
        write = event["verb"] in WRITES
        if management:
            counts["management"] += write
            if write:
                by_resource[_resource(event)] += 1
        else:
            counts["workloads" if write else "workload_reads"] += 1
    counts["management_writes_by_resource"] = dict(sorted(by_resource.items()))
    return counts


def audit_counts(plane: ControlPlane, since: float, users: Collection[str]) -> Figures:
    """Requests by ``users`` since ``since``: management writes (also by resource),
    workload writes and workload reads, from the servers' audit logs."""
    return _tally(_events(plane, since), lambda event: event["user"]["username"] in users)


def _sent_by(member: str, event: Event) -> bool:
    return f"shard member {member})" in event.get("userAgent", "")


def member_counts(plane: ControlPlane, since: float, members: Iterable[str]) -> dict[str, Figures]:
    """``audit_counts`` for each shard member, told apart by User-Agent
    ("crs-controller (shard member <name>)"): the replicas share the workload user."""
    events = _events(plane, since)
    return {m: _tally(events, functools.partial(_sent_by, m)) for m in members}


def poll_interval(n: int) -> float:
    """How often the bindings are listed while waiting: often enough to time small
    runs to 0.1 s, rarely enough that listing thousands of bindings does not load
    the management server the controllers are measured on."""
    return round(min(1.0, max(0.1, n / 2000)), 2)


def _until(predicate: Callable[[], object], n: int, message: str) -> None:
    partial = functools.partial(_tolerant, predicate)
    wait_for(partial, TIMEOUT, interval=poll_interval(n), message=message)


def until_applied(
    n: int, hashes: Callable[[], list[str]], message: str, replacing: Collection[str] = ()
) -> None:
    """Until all ``n`` clusters have an applied hash in their binding, none of them
    one of ``replacing`` (the hashes from before an edit)."""
    old = set(replacing)

    def done() -> bool:
        found = hashes()
        return len(found) == n and not set(found) & old

    _until(done, n, message)


def _tolerant(predicate: Callable[[], object]) -> object:
    """A poll that a busy or briefly unavailable server answers is just "not yet"
    (e.g. 429 "storage is (re)initializing" on a resource's first use)."""
    try:
        return predicate()
    except KubeError as exc:
        if exc.status == 429 or exc.status >= 500:
            return None
        raise


def _start(controller: Controller, figures: Figures) -> tuple[int, float]:
    """Start the process; the clock and the CPU count start at the spawn, since
    "ready" does not mean the same thing for both controllers."""
    started = time.time()
    controller.start()
    assert controller.pid is not None
    figures["startup_seconds"] = round(time.time() - started, 2)
    figures["startup_cpu_seconds"] = round(cpu_seconds(controller.pid), 2)
    return controller.pid, started


def _first_apply(
    controller: Controller, figures: Figures, n: int, hashes: Callable[[], list[str]]
) -> tuple[int, float]:
    pid, started = _start(controller, figures)
    until_applied(n, hashes, "first apply")
    figures["first_apply_seconds"] = round(time.time() - started, 2)
    figures["first_apply_cpu_seconds"] = round(cpu_seconds(pid), 2)
    return pid, started


def _edit(
    pid: int, figures: Figures, n: int, hashes: Callable[[], list[str]], edit: Callable[[], None]
) -> float:
    first = set(hashes())
    edited = time.time()
    cpu = cpu_seconds(pid)
    edit()
    until_applied(n, hashes, "edit applied", replacing=first)
    figures["edit_seconds"] = round(time.time() - edited, 2)
    figures["edit_cpu_seconds"] = round(cpu_seconds(pid) - cpu, 2)
    return edited


def measure(
    plane: ControlPlane,
    controller: Controller,
    *,
    n: int,
    users: Collection[str],
    hashes: Callable[[], list[str]],
    edit: Callable[[], None],
) -> Figures:
    """First apply to ``n`` clusters, one edit reaching all of them, 10 s idle.

    ``hashes`` lists the applied hashes recorded in the bindings (one per cluster
    when done); ``edit`` changes the add-on ConfigMap; ``users`` are the identities
    whose requests are counted.
    """
    figures: Figures = {}
    try:
        pid, started = _first_apply(controller, figures, n, hashes)
        time.sleep(3)  # audit events are written after the response; let stragglers land
        figures["first_apply_requests"] = audit_counts(plane, started, users)
        edited = _edit(pid, figures, n, hashes, edit)
        time.sleep(3)
        figures["edit_requests"] = audit_counts(plane, edited, users)
        idle, cpu = time.time(), cpu_seconds(pid)
        time.sleep(10)
        figures["idle_10s_cpu_seconds"] = round(cpu_seconds(pid) - cpu, 3)
        figures["idle_10s_requests"] = audit_counts(plane, idle, users)
        figures["controller_rss_mib"] = round(rss_mib(pid), 1)
    finally:
        controller.stop()
    return figures | derived(figures, n)


def _per(numerator: float, denominator: float, scale: float = 1.0, digits: int = 2) -> float | None:
    return round(numerator * scale / denominator, digits) if denominator else None


def derived(figures: Figures, n: int) -> Figures:
    edit, first = figures["edit_requests"], figures["first_apply_requests"]
    return {
        "edit_requests_per_cluster": {
            "workloads": _per(edit["workloads"], n),
            "management": _per(edit["management"], n),
        },
        "edit_cpu_ms_per_cluster": _per(figures["edit_cpu_seconds"], n, 1000),
        "first_apply_cpu_ms_per_workload_write": _per(
            figures["first_apply_cpu_seconds"], first["workloads"], 1000
        ),
    }


RATIO_KEYS = ("first_apply_seconds", "first_apply_cpu_seconds", "edit_seconds", "edit_cpu_seconds")


def ratios(crs: Figures, capi: Figures) -> Figures:
    """crs-controller / Cluster API for each figure (below 1: crs-controller is cheaper)."""
    return {key: _per(crs[key], capi[key], digits=3) for key in RATIO_KEYS}
