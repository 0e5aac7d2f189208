"""What both benchmark phases share: the add-on, the process figures, the audit
counts and the measuring sequence itself, so crs-controller and Cluster API's
manager are timed by exactly the same code.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import httpx
import yaml

from crs_controller.testbed import ControlPlane, KubeError, TestbedClient, wait_for

REPO = Path(__file__).resolve().parents[2]
ADDONS = REPO.parent / "shared" / "data" / "addons"
WRITES = {"create", "update", "patch", "delete", "deletecollection"}
TIMEOUT = 1800.0

Figures = dict[str, Any]
# The CRS's status as (revision, every cluster applied at it), or no such figure.
Settled = Callable[[], tuple[str | None, bool]] | None


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


def _serves(mgmt: TestbedClient, path: str) -> bool:
    return mgmt.http.get(path).status_code == 200


def warm_up(mgmt: TestbedClient, files: Iterable[Path]) -> None:
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
    return sum(cpu_split(pid))


def cpu_split(pid: int) -> tuple[float, float]:
    """Seconds of CPU in user space and in the kernel (the kernel's share includes
    the loopback TCP work of requests to the API servers on the same machine)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """Resident memory now; ``field="VmHWM"``: its peak since the process started."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
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
) -> tuple[float, float]:
    """The edit until every cluster's binding has it: its start and the CPU before it."""
    first = set(hashes())
    edited = time.time()
    user, system = cpu_split(pid)
    edit()
    until_applied(n, hashes, "edit applied", replacing=first)
    figures["edit_seconds"] = round(time.time() - edited, 2)
    user_after, system_after = cpu_split(pid)
    figures["edit_cpu_seconds"] = round(user_after + system_after - user - system, 2)
    figures["edit_cpu_system_seconds"] = round(system_after - system, 2)
    return edited, user + system


def _settled(
    pid: int, figures: Figures, n: int, before: tuple[float, float], settled: Settled
) -> None:
    """Until the CRS's status tells of the edit on every cluster (the status passes
    after the last binding write are the edit's too): ``edit_settled_*``."""
    if settled is None:
        return
    old = figures["revision_before_edit"]
    _until(lambda: (status := settled())[0] != old and status[1], n, "status settled")
    edited, cpu = before
    figures["edit_settled_seconds"] = round(time.time() - edited, 2)
    figures["edit_settled_cpu_seconds"] = round(sum(cpu_split(pid)) - cpu, 2)


def measure(
    plane: ControlPlane,
    controller: Controller,
    *,
    n: int,
    users: Collection[str],
    hashes: Callable[[], list[str]],
    edit: Callable[[], None],
    settled: Settled = None,
) -> Figures:
    """First apply to ``n`` clusters, one edit reaching all of them, 10 s idle.

    ``hashes`` lists the applied hashes recorded in the bindings (one per cluster
    when done); ``edit`` changes the add-on ConfigMap; ``users`` are the identities
    whose requests are counted; ``settled``, when given, reads the CRS's status: the
    idle 10 s then start once it names a new revision applied everywhere.
    """
    figures: Figures = {}
    try:
        pid, started = _first_apply(controller, figures, n, hashes)
        time.sleep(3)  # audit events are written after the response; let stragglers land
        figures["first_apply_requests"] = audit_counts(plane, started, users)
        figures["revision_before_edit"] = settled()[0] if settled else None
        edited, cpu = _edit(pid, figures, n, hashes, edit)
        _settled(pid, figures, n, (edited, cpu), settled)
        time.sleep(3)
        figures["edit_requests"] = audit_counts(plane, edited, users)
        idle, cpu = time.time(), cpu_seconds(pid)
        time.sleep(10)
        figures["idle_10s_cpu_seconds"] = round(cpu_seconds(pid) - cpu, 3)
        figures["idle_10s_requests"] = audit_counts(plane, idle, users)
        figures["controller_rss_mib"] = round(rss_mib(pid), 1)
        figures["controller_peak_rss_mib"] = round(rss_mib(pid, "VmHWM"), 1)
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


# --- Sampling a running controller (noisy_neighbor.py) ------------------------------


def vm_kib(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` figure in KiB (``VmRSS``, ``VmHWM``); 0 once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def machine() -> Figures:
    """What the figures were measured on: CPUs, memory, CPU model, kernel, Python."""
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    total = next((int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:")), 0)
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo if "model name" in line), "")
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpus": os.cpu_count(),
        "memory_mib": round(total / 1024),
        "cpu_model": model or platform.processor() or platform.machine(),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def git_state(repo: Path = REPO) -> Figures:
    """The commit measured and the files that differ from it (a shared working tree
    may hold changes not committed yet: the run measured those too)."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
        )
        return done.stdout

    changed = [line[3:] for line in git("status", "--porcelain").splitlines() if line]
    return {
        "commit": git("rev-parse", "HEAD").strip(),
        "subject": git("log", "-1", "--format=%s").strip()[:120],
        "uncommitted_count": len(changed),
        "uncommitted_files": changed[:30],
    }


class Sampler:
    """Calls ``sample`` every ``interval`` seconds on a thread of its own until
    ``stop``; the time a sample takes counts towards the interval."""

    def __init__(self, sample: Callable[[], None], interval: float) -> None:
        self._sample = sample
        self._interval = interval
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stopping.is_set():
            began = time.monotonic()
            self._sample()
            self._stopping.wait(max(0.0, self._interval - (time.monotonic() - began)))


class HealthProbe(Sampler):
    """Times a GET of ``url`` (``/healthz``) every ``interval`` seconds; an answer
    other than 200, or none within ``timeout``, is a failure."""

    def __init__(self, url: str, interval: float = 0.15, timeout: float = 5.0) -> None:
        super().__init__(self._probe, interval)
        self._client = httpx.Client(timeout=timeout)
        self._url = url
        self.latencies: list[float] = []
        self.failures: list[Figures] = []
        self._began = time.monotonic()

    def _probe(self) -> None:
        began = time.monotonic()
        try:
            status = self._client.get(self._url).status_code
            error = "" if status == 200 else f"HTTP {status}"
        except httpx.HTTPError as exc:
            error = type(exc).__name__
        took = time.monotonic() - began
        self.latencies.append(took)
        if error:
            at = round(began - self._began, 1)
            self.failures.append({"at_seconds": at, "error": error, "took": round(took, 2)})

    def stop(self) -> None:
        super().stop()
        self._client.close()

    def figures(self, slow: float = 1.0) -> Figures:
        return {
            "samples": len(self.latencies),
            "max_seconds": round(max(self.latencies, default=0.0), 3),
            "p99_seconds": _rounded(percentile(self.latencies, 99)),
            "p50_seconds": _rounded(percentile(self.latencies, 50)),
            f"over_{slow:g}s": sum(t > slow for t in self.latencies),
            "failures": len(self.failures),
            "first_failures": self.failures[:5],
        }


def _rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


class MemoryProbe(Sampler):
    """Samples a process's VmRSS every ``interval`` seconds. Past ``abort_mib`` it
    calls ``on_abort`` once (the benchmark kills the process: an OOM kill, sooner
    than the machine would)."""

    def __init__(
        self, pid: int, on_abort: Callable[[], None], abort_mib: float, interval: float = 0.2
    ) -> None:
        super().__init__(self._probe, interval)
        self._pid = pid
        self._on_abort = on_abort
        self._abort_mib = abort_mib
        self._began = time.monotonic()
        self.samples: list[tuple[float, float]] = []  # (seconds since start, MiB)
        self.aborted_at: float | None = None

    def _probe(self) -> None:
        mib = vm_kib(self._pid, "VmRSS") / 1024
        if not mib:
            return
        at = time.monotonic() - self._began
        self.samples.append((at, mib))
        if mib > self._abort_mib and self.aborted_at is None:
            self.aborted_at = round(at, 1)
            self._on_abort()

    def figures(self) -> Figures:
        peak = max(self.samples, key=lambda s: s[1], default=(0.0, 0.0))
        return {
            "samples": len(self.samples),
            "start_mib": round(self.samples[0][1], 1) if self.samples else None,
            "peak_mib": round(peak[1], 1),
            "peak_at_seconds": round(peak[0], 1),
            "end_mib": round(self.samples[-1][1], 1) if self.samples else None,
            "killed_above_mib": self._abort_mib if self.aborted_at is not None else None,
            "killed_at_seconds": self.aborted_at,
        }
