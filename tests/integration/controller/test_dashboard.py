"""`crs-controller dashboard` in a real headless browser (Debian's chromium through
WebDriver), on the real management server: a rollout the session's controller runs
(the canary on the new revision, the rest waiting for the approval of their step);
a CRS in the middle of a rollout (step 1 done, step 2 waiting for its approval, one
cluster holding updates) shows each cluster in its step with its state and waiting
reason as text, and the clusters it holds; a binding edited on the management
cluster shows up without a reload; a message holding markup from a tenant is shown
as text and runs nothing; one cluster's page lists each CRS on it with its own
state; with ``-A``, the filters (namespace, state, labels), the rollout moving on and
a Cluster joining. The browser opens the URL the command printed, with its token,
and lands on the page without it, holding a cookie no script reads. Run as a user
granted get, list and watch alone, the command draws and follows the rollout and
asks for nothing else (the server's audit log); the content of a Secret it reads to
hash is nowhere in the feed, the records or the page. Those CRSs carry Cluster API's
paused annotation and their records are written here as the controller writes them,
so the session's controller leaves them alone. The page's headers and its refusals
(another Host, a write; the page and each piece of its data without the token or
with another run's) are checked over plain HTTP, and the token is in none of the
command's log lines. Screenshots are left in the test artifacts
(``build/test-artifacts``, or ``$CRS_CONTROLLER_ARTIFACTS``)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from crs_controller.core.api.clusters import HOLD_UPDATES_ANNOTATION, PAUSED_ANNOTATION
from crs_controller.engine.reconcile.rollout import revision_of
from crs_controller.testbed import ControlPlane, KubeError, TestbedClient, wait_for
from crs_controller.testbed.browser import Browser, browser, missing
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CLUSTER_API,
    CRS_API,
    TIMEOUT,
    admin_kubeconfig,
    configmap_obj,
    crs_obj,
    manifests,
    source_configmap,
    source_secret,
    unique,
    until_no_conflict,
    wait_condition,
)
from .test_cli_ux import Lines
from .test_rollout import add, edit
from .test_rollout_controls import REST, canary, moved_on, revision, rollout_crs

HASH, OLD = "xxh3:0000000000000a11", "xxh3:0000000000000b22"
REVISION = revision_of({("ConfigMap", "addon"): HASH})
HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
ARTIFACTS = Path(
    os.environ.get("CRS_CONTROLLER_ARTIFACTS")
    or Path(__file__).resolve().parents[3] / "build" / "test-artifacts"
)
RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC = f"{RBAC_GROUP}/v1"
READ = ["get", "list", "watch"]
# What the command reads: the CRSs, their bindings and the Clusters (listed, then
# watched), and the sources of resources that follow the Kubernetes version (read).
READ_KINDS = [
    (CRS_API, "ClusterResourceSet"),
    (CRS_API, "ClusterResourceSetBinding"),
    (CLUSTER_API, "Cluster"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
]
WATCHED = ["clusterresourcesets", "clusterresourcesetbindings", "clusters"]
VIEWER_RULES = [
    {
        "apiGroups": [CRS_API.split("/")[0]],
        "resources": ["clusterresourcesets", "clusterresourcesetbindings"],
        "verbs": READ,
    },
    {"apiGroups": [CLUSTER_API.split("/")[0]], "resources": ["clusters"], "verbs": READ},
    {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": READ},
]
V1_30 = ">=1.30.0"
# Each cluster: (ring, holds updates, recorded reason, ready, hash, message).
FLEET: dict[str, tuple[str, bool, str, bool | None, str, str]] = {
    "canary-1": ("canary", False, "Applied", None, HASH, ""),
    "canary-2": ("canary", False, "Applied", False, HASH, "waits for Deployment kube-system/cni"),
    "prod-1": ("prod", False, "Progressing", None, OLD, "step 2 waits for approval"),
    "prod-2": ("prod", False, "ClusterUnreachable", None, OLD, "connection refused"),
    "prod-3": ("prod", False, "ApplyFailed", None, OLD, f"Deployment x: {HOSTILE}"),
    "held-1": ("prod", True, "UpdateHeld", None, OLD, "the cluster holds updates"),
}

pytestmark = pytest.mark.skipif(missing() is not None, reason=str(missing()))


def mid_rollout(mgmt: TestbedClient, namespace: str) -> str:
    """A paused CRS at step 2 of 2 waiting for approval, its clusters and bindings."""
    name = unique("fleet")
    steps = [
        {"clusterSelector": {"matchLabels": {"ring": "canary"}}},
        {"clusterSelector": {"matchLabels": {"ring": "prod"}}, "approval": "Manual"},
    ]
    crs = crs_obj(namespace, name, [("ConfigMap", "addon")], {"fleet": "on"}, "Reconcile")
    crs["spec"]["rollout"] = {"steps": steps}
    crs["metadata"]["annotations"] = {PAUSED_ANNOTATION: "true"}
    created = mgmt.create(crs)
    rollout = {
        "phase": "AwaitingApproval",
        "step": 2,
        "waitingFor": "Approval",
        "heldClusters": 1,
        "message": "step 2 waits for approval",
    }

    until_no_conflict(lambda: write_rollout(mgmt, namespace, name, rollout))
    del created
    for cluster, (ring, held, reason, ready, digest, message) in FLEET.items():
        meta: dict[str, Any] = {"name": cluster, "namespace": namespace}
        meta["labels"] = {"fleet": "on", "ring": ring}
        if held:
            meta["annotations"] = {HOLD_UPDATES_ANNOTATION: "true"}
        mgmt.create({"apiVersion": CLUSTER_API, "kind": "Cluster", "metadata": meta, "spec": {}})
        mgmt.create(binding(namespace, cluster, name, reason, ready, digest, message))
    return name


def write_rollout(mgmt: TestbedClient, namespace: str, name: str, rollout: dict[str, Any]) -> None:
    """The rollout as the controller writes it, beside what the status holds (the
    session's controller, when it runs, marks the paused CRS Paused)."""
    live = mgmt.get(CRS_API, "ClusterResourceSet", name, namespace)
    assert live is not None
    live["status"] = {**(live.get("status") or {}), "revision": REVISION, "rollout": rollout}
    mgmt.update_status(live)


def binding(
    namespace: str,
    cluster: str,
    crs: str,
    reason: str,
    ready: bool | None,
    digest: str,
    message: str,
    source: tuple[str, str] = ("ConfigMap", "addon"),
) -> dict[str, Any]:
    outcome: dict[str, Any] = {"reason": reason, "message": message}
    if ready is not None:
        outcome["ready"] = ready
    resource = {"kind": source[0], "name": source[1], "hash": digest, "applied": True}
    entry = {"clusterResourceSetName": crs, "resources": [resource], "outcome": outcome}
    return {
        "apiVersion": CRS_API,
        "kind": "ClusterResourceSetBinding",
        "metadata": {"name": cluster, "namespace": namespace},
        "spec": {"clusterName": cluster, "bindings": [entry]},
    }


@dataclass
class Dashboard:
    """A running ``crs-controller dashboard``: the URL it printed (with its token), its
    process, its stderr."""

    printed: str
    process: subprocess.Popen[str]
    stderr: Path

    @property
    def base(self) -> str:
        """The address served, without the token."""
        return self.printed.split("/?", 1)[0]

    @property
    def token(self) -> str:
        return self.printed.split("?token=", 1)[1]

    def at(self, fragment: str) -> str:
        """The printed URL opening the page at ``fragment`` (``#/crs/NS/NAME``)."""
        return f"{self.printed}{fragment}"

    @contextmanager
    def client(self) -> Iterator[httpx.Client]:
        """An HTTP client that has opened the printed URL, so it holds the cookie."""
        with httpx.Client(base_url=self.base, timeout=TIMEOUT) as http:
            opened = http.get(self.printed, follow_redirects=True)
            assert opened.status_code == 200, opened.text
            yield http


@contextmanager
def dashboard(kubeconfig: str | Path, stderr: Path, *where: str) -> Iterator[Dashboard]:
    """The dashboard of ``where`` (``-n NS`` or ``-A``) on a free port, as the user of
    ``kubeconfig``; its stderr written to ``stderr``."""
    command = [sys.executable, "-m", "crs_controller.app.cli", "dashboard", *where]
    command += ["--address", "127.0.0.1:0", "--kubeconfig", str(kubeconfig)]
    with stderr.open("w") as errors:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True)
    try:
        line = Lines(process).wait_for(lambda text: "http://" in text)
        yield Dashboard(line.split("on ", 1)[1].split()[0], process, stderr)
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture
def served(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[Dashboard]:
    kubeconfig = admin_kubeconfig(control_plane, tmp_path)
    with dashboard(kubeconfig, tmp_path / "dashboard.stderr", "-n", namespace) as running:
        yield running


@pytest.fixture
def served_all(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Dashboard]:
    kubeconfig = admin_kubeconfig(control_plane, tmp_path)
    with dashboard(kubeconfig, tmp_path / "dashboard.stderr", "-A") as running:
        yield running


@pytest.fixture
def viewer(control_plane: ControlPlane, mgmt: TestbedClient, namespace: str) -> Iterator[str]:
    """A user who may only get, list and watch what the page reads, in ``namespace``
    (a ClusterRole granted there): its name, once the grant is in force."""
    user = unique("viewer")
    role: dict[str, Any] = {"apiVersion": RBAC, "kind": "ClusterRole", "rules": VIEWER_RULES}
    role["metadata"] = {"name": user}
    grant = {
        "apiVersion": RBAC,
        "kind": "RoleBinding",
        "metadata": {"name": user, "namespace": namespace},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": RBAC_GROUP, "kind": "User", "name": user}],
    }
    mgmt.create(role)
    mgmt.create(grant)
    try:
        with TestbedClient(control_plane.management.kubeconfig(user, ())) as client:
            wait_for(lambda: may_read(client, namespace), TIMEOUT, message="the grant in force")
        yield user
    finally:
        mgmt.delete(RBAC, "RoleBinding", user, namespace)
        mgmt.delete(RBAC, "ClusterRole", user)


def may_read(client: TestbedClient, namespace: str) -> bool:
    """Whether ``client``'s user may list each kind the page reads in ``namespace``
    (not yet: refused, or a kind's storage still starting on a fresh server)."""
    try:
        for api_version, kind in READ_KINDS:
            client.list(api_version, kind, namespace)
    except KubeError as exc:
        if exc.status not in (403, 429):
            raise
        return False
    return True


@pytest.fixture
def served_to_viewer(
    control_plane: ControlPlane, namespace: str, viewer: str, tmp_path: Path
) -> Iterator[Dashboard]:
    kubeconfig = control_plane.management.write_kubeconfig(
        tmp_path / "viewer.kubeconfig", user=viewer, groups=()
    )
    with dashboard(kubeconfig, tmp_path / "dashboard.stderr", "-n", namespace) as running:
        yield running


def requests_of(control_plane: ControlPlane, user: str) -> list[tuple[str, str, str]]:
    """Each request ``user`` made of the management server so far (its audit log):
    (verb, resource or non-resource path, name)."""
    found = []
    for event in control_plane.management.audit_events():
        if event["user"]["username"] == user:
            ref = event.get("objectRef") or {}
            what = ref.get("resource") or event.get("requestURI", "")
            found.append((event["verb"], what, ref.get("name") or ""))
    return found


def choose(page: Browser, control: str, value: str) -> None:
    """A filter set as a person sets it: the value, then the input event."""
    page.run(
        "const c = document.getElementById(arguments[0]); c.value = arguments[1];"
        "c.dispatchEvent(new Event('input'))",
        control,
        value,
    )


def cells(page: Browser) -> dict[str, str]:
    """Each drawn cell's cluster name and its text (symbol, name, state and reason)."""
    found: dict[str, str] = page.run(
        "const out = {};"
        "for (const b of document.querySelectorAll('button.cell')) {"
        "  out[b.querySelector('.name').textContent] = b.querySelector('.state').textContent; }"
        "return out;"
    )
    return found


def test_a_rollout_in_the_middle_is_drawn_live_and_tenant_text_stays_text(
    mgmt: TestbedClient, namespace: str, served: Dashboard
) -> None:
    name = mid_rollout(mgmt, namespace)
    with browser() as page:
        page.open(served.at(f"#/crs/{namespace}/{name}"))
        page.wait("return document.querySelectorAll('button.cell').length === 6")
        # Opened with its token, the page is at its address without it; the cookie
        # that now carries it is for the server alone.
        assert page.run("return location.href") == f"{served.base}/#/crs/{namespace}/{name}"
        assert page.run("return document.cookie") == ""
        assert cells(page) == {
            "canary-1": "Ready",
            "canary-2": "Progressing · Applied",
            "prod-1": "Waiting · Progressing",
            "prod-2": "Unreachable · ClusterUnreachable",
            "prod-3": "Failed · ApplyFailed",
            "held-1": "Waiting · UpdateHeld",
        }
        # Grouped by rollout step; the cluster holding updates in none.
        headings = page.run(
            "return [...document.querySelectorAll('section.step h2')].map(h => h.textContent)"
        )
        assert headings == [
            "Step 1 · 2 clusters",
            "Step 2 · 3 clusters",
            "Holding updates (in no step) · 1 cluster",
        ]
        summary = page.run("return document.getElementById('crs-summary').innerText")
        assert "AwaitingApproval" in summary
        assert "2 of 2" in summary
        assert "approval" in summary
        held = page.run(
            "const s = document.getElementById('crs-summary');"
            "const t = [...s.querySelectorAll('dt')].find(d => d.textContent === 'Held clusters');"
            "return t && t.nextElementSibling.textContent"
        )
        assert held == "1"
        # Every cluster's name and state are text in the page, as find-in-page reads it.
        text = page.run("return document.body.innerText")
        assert all(cluster in text for cluster in FLEET)
        page.screenshot(ARTIFACTS / "dashboard-crs.png")

        # The fleet: the CRS's rollout and its clusters counted by state.
        page.run("window.stayed = true; location.hash = '#/'")
        row = page.wait(
            "const r = document.querySelector('table.fleet tbody tr'); return r && r.innerText"
        )
        for shown in (f"{namespace}/{name}", "AwaitingApproval", "2 of 2", "approval"):
            assert shown in row
        for count in ("Ready 1", "Progressing 1", "Waiting 2", "Unreachable 1", "Failed 1"):
            assert count in row
        columns = page.run(
            "return [...document.querySelectorAll('table.fleet thead th')].map(h => h.textContent)"
        )
        held = page.run(
            "return document.querySelector('table.fleet tbody tr').cells[arguments[0]].textContent",
            columns.index("Held"),
        )
        assert held == "1"
        page.screenshot(ARTIFACTS / "dashboard-fleet.png")

        # An edit on the management cluster, shown without a reload.
        page.run(f"location.hash = '#/crs/{namespace}/{name}'")
        page.wait("return document.querySelectorAll('button.cell').length === 6")
        live = mgmt.get(CRS_API, "ClusterResourceSetBinding", "prod-1", namespace)
        assert live is not None
        live["spec"] = binding(namespace, "prod-1", name, "Applied", None, HASH, "")["spec"]
        mgmt.update(live)
        page.wait(
            "return document.querySelector(\"button.cell[data-key$='/prod-1']\")"
            ".textContent.endsWith('Ready')"
        )
        assert page.run("return window.stayed") is True  # the same page: no reload

        # A cluster selected: its reason and its binding's record.
        page.run("document.querySelector(\"button.cell[data-key$='/canary-2']\").click()")
        detail = page.wait(
            "const d = document.getElementById('detail');"
            "return !d.hidden && d.innerText.includes('outcome') && d.innerText"
        )
        assert "waits for Deployment kube-system/cni" in detail
        assert "ConfigMap/addon" in detail
        page.screenshot(ARTIFACTS / "dashboard.png")

        # The tenant's markup in a message: shown as text, run nowhere.
        page.run("document.querySelector(\"button.cell[data-key$='/prod-3']\").click()")
        detail = page.wait(
            "const d = document.getElementById('detail');"
            "const t = d.innerText;"
            "return !d.hidden && t.includes('ApplyFailed') && t.includes('\"outcome') && t"
        )
        assert HOSTILE in detail
        assert page.run("return document.querySelectorAll('img, script:not([src])').length") == 0
        assert page.run("return window.pwned === undefined") is True
        page.screenshot(ARTIFACTS / "dashboard-hostile.png")

        # One cluster: every CRS on it and its outcome; a second CRS selects prod-3.
        other = second_crs(mgmt, namespace, "prod-3")
        page.run(f"location.hash = '#/cluster/{namespace}/prod-3'")
        rows = page.wait(
            "const rows = document.querySelectorAll('table.cluster tbody tr');"
            "return rows.length === 2 && [...rows].map(r => [...r.cells].map(c => c.innerText))"
        )
        by_crs = {row[0]: row for row in rows}
        assert set(by_crs) == {f"{namespace}/{name}", f"{namespace}/{other}"}
        mine, theirs = by_crs[f"{namespace}/{name}"], by_crs[f"{namespace}/{other}"]
        assert (mine[1].split()[-1], mine[2]) == ("Failed", "ApplyFailed")
        assert HOSTILE in mine[-1]
        assert (theirs[1].split()[-1], theirs[2]) == ("Waiting", "OutsideWindow")
        assert theirs[-1] == "waits for the window"
        assert page.run("return window.pwned === undefined") is True


def second_crs(mgmt: TestbedClient, namespace: str, cluster: str) -> str:
    """Another paused CRS selecting ``cluster``, its record there (waiting for its
    window) added to the cluster's binding: its name."""
    name = unique("second")
    crs = crs_obj(namespace, name, [("ConfigMap", "addon")], {"ring": "prod"}, "Reconcile")
    crs["metadata"]["annotations"] = {PAUSED_ANNOTATION: "true"}
    mgmt.create(crs)
    entry = binding(namespace, cluster, name, "OutsideWindow", None, OLD, "waits for the window")

    def add_entry() -> None:
        live = mgmt.get(CRS_API, "ClusterResourceSetBinding", cluster, namespace)
        assert live is not None
        live["spec"]["bindings"].append(entry["spec"]["bindings"][0])
        mgmt.update(live)

    until_no_conflict(add_entry)
    return name


def test_the_page_is_read_only_and_answers_its_own_address_only(served: Dashboard) -> None:
    with served.client() as http:
        page = http.get("/")
        assert page.status_code == 200
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy
        assert "default-src 'none'" in policy
        assert "unsafe-inline" not in policy
        assert page.headers["x-content-type-options"] == "nosniff"
        assert '<script src="/app.js"' in page.text
        assert http.get("/app.js").headers["content-type"].startswith("text/javascript")
        assert http.post("/events").status_code == 405
        assert http.get("/", headers={"host": "evil.example:80"}).status_code == 403
        assert http.get("/record?namespace=x&cluster=y&crs=z").status_code == 404


def test_the_page_and_its_data_need_the_printed_token(
    mgmt: TestbedClient, namespace: str, served: Dashboard
) -> None:
    """Another user of the host, who can reach the port and name the right Host but
    has not seen the printed URL, is refused the page and every piece of its data."""
    name = mid_rollout(mgmt, namespace)
    record = f"/record?namespace={namespace}&cluster=prod-3&crs={name}"
    other_run = served.token[::-1]
    for path in ("/", "/app.js", "/events", record):
        for query in ("", f"token={other_run}"):
            asked = f"{path}{'&' if '?' in path else '?'}{query}" if query else path
            answer = httpx.get(f"{served.base}{asked}", timeout=TIMEOUT)
            assert answer.status_code == 403, (path, query)
            assert "token" in answer.text
            assert name not in answer.text
            assert "set-cookie" not in answer.headers
    with served.client() as http:
        opened = http.get(served.printed)
        assert opened.status_code == 303
        assert opened.headers["location"] == "/"
        assert "HttpOnly" in opened.headers["set-cookie"]
        answer = http.get(record)
        assert answer.status_code == 200
        assert answer.json()["outcome"]["reason"] == "ApplyFailed"
    assert served.token not in served.stderr.read_text()


@pytest.fixture
def other_namespace(mgmt: TestbedClient) -> Iterator[str]:
    name = unique("test-other")
    mgmt.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    mgmt.delete("v1", "Namespace", name)


def fleet_rows(page: Browser) -> list[str]:
    """The CRSs the fleet table shows, as NAMESPACE/NAME."""
    rows: list[str] = page.run(
        "return [...document.querySelectorAll('table.fleet tbody tr')]"
        ".map(r => r.cells[0].innerText)"
    )
    return rows


def test_filters_a_rollout_moving_on_and_a_cluster_joining(
    mgmt: TestbedClient, namespace: str, other_namespace: str, served_all: Dashboard
) -> None:
    """With -A, every namespace, filtered on the page; the CRS's own status and a new
    Cluster arrive by the watches too."""
    name = mid_rollout(mgmt, namespace)
    elsewhere = crs_obj(other_namespace, "elsewhere", [("ConfigMap", "addon")], {"fleet": "on"})
    elsewhere["metadata"]["annotations"] = {PAUSED_ANNOTATION: "true"}
    mgmt.create(elsewhere)
    mine, theirs = f"{namespace}/{name}", f"{other_namespace}/elsewhere"
    with browser() as page:
        page.open(served_all.at("#/"))
        wait_for(
            lambda: {mine, theirs} <= set(fleet_rows(page)),
            TIMEOUT,
            message=f"both namespaces' CRSs listed: {fleet_rows(page)}",
        )
        choose(page, "f-namespace", namespace)
        assert fleet_rows(page) == [mine]
        choose(page, "f-namespace", other_namespace)
        assert fleet_rows(page) == [theirs]
        choose(page, "f-namespace", "")
        assert {mine, theirs} <= set(fleet_rows(page))

        page.run(f"window.stayed = true; location.hash = '#/crs/{namespace}/{name}'")
        page.wait("return document.querySelectorAll('button.cell').length === 6")
        choose(page, "f-state", "Waiting")
        assert cells(page) == {
            "prod-1": "Waiting · Progressing",
            "held-1": "Waiting · UpdateHeld",
        }
        choose(page, "f-state", "")
        choose(page, "f-label", "ring=canary")
        assert set(cells(page)) == {"canary-1", "canary-2"}
        choose(page, "f-label", "ring!=canary, fleet")
        assert set(cells(page)) == {"prod-1", "prod-2", "prod-3", "held-1"}
        choose(page, "f-label", "")

        # The rollout goes on: the CRS's header follows its status.
        rollout = {"phase": "Progressing", "step": 2, "heldClusters": 1, "message": "step 2 goes"}
        until_no_conflict(lambda: write_rollout(mgmt, namespace, name, rollout))
        summary = page.wait(
            "const s = document.getElementById('crs-summary').innerText;"
            "return s.includes('step 2 goes') && s"
        )
        assert "AwaitingApproval" not in summary
        assert "approval" not in summary

        # A Cluster joins: its cell appears, Pending until its binding records anything.
        meta = {"name": "prod-4", "namespace": namespace, "labels": {"fleet": "on", "ring": "prod"}}
        mgmt.create({"apiVersion": CLUSTER_API, "kind": "Cluster", "metadata": meta, "spec": {}})
        page.wait("return document.querySelectorAll('button.cell').length === 7")
        assert cells(page)["prod-4"] == "Pending"
        assert page.run("return window.stayed") is True


def test_a_rollout_the_controller_runs_is_shown_where_it_stands(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    namespace: str,
    served: Dashboard,
) -> None:
    """The session's controller rolls a new revision out: the canary takes it, the
    rest wait for the approval of their Manual step."""
    marker = unique("paged")
    mgmt.create(
        source_configmap(namespace, "paged", {"a": manifests(configmap_obj(marker, v="1"))})
    )
    mgmt.create(rollout_crs(namespace, "paged", [canary(), {**REST, "approval": "Manual"}]))
    for index, (name, ring) in enumerate({"m1": "canary", "m2": "rest", "m3": "rest"}.items()):
        add(mgmt, control_plane, namespace, index, name, ring=ring)
    wait_condition(mgmt, namespace, "paged", "Ready", "True", "Applied")  # first installs
    before = revision(mgmt, namespace, "paged")
    edit(mgmt, namespace, "paged", configmap_obj(marker, v="2"))
    status = moved_on(mgmt, namespace, "paged", before, "AwaitingApproval")
    assert status["step"] == 2, status

    with browser() as page:
        page.open(served.at(f"#/crs/{namespace}/paged"))
        page.wait("return document.querySelectorAll('button.cell').length === 3")
        wait_for(
            lambda: (
                cells(page)
                == {"m1": "Ready", "m2": "Waiting · Progressing", "m3": "Waiting · Progressing"}
            ),
            TIMEOUT,
            message=f"the cells as the rollout stands: {cells(page)}",
        )
        headings = page.run(
            "return [...document.querySelectorAll('section.step h2')].map(h => h.textContent)"
        )
        assert headings == ["Step 1 · 1 cluster", "Step 2 · 2 clusters"]
        summary = page.run("return document.getElementById('crs-summary').innerText")
        for shown in ("AwaitingApproval", "2 of 2", "approval", "Ready 1", "Waiting 2"):
            assert shown in summary, summary
        page.screenshot(ARTIFACTS / "dashboard-controller.png")
    # Not left waiting for approval once the namespace goes: after a restart, such
    # clusters' outcomes may be written again with a new time (a known fault), which
    # the steady-state test would count.
    mgmt.delete(CRS_API, "ClusterResourceSet", "paged", namespace)
    wait_for(
        lambda: mgmt.get(CRS_API, "ClusterResourceSet", "paged", namespace) is None,
        TIMEOUT,
        message="the rollout's CRS gone",
    )


def test_a_user_who_may_only_read_is_shown_the_rollout_live(
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    namespace: str,
    viewer: str,
    served_to_viewer: Dashboard,
) -> None:
    """Run as a user granted get, list and watch alone, the command draws the rollout
    and follows an edit, and asks the management server for nothing else."""
    name = mid_rollout(mgmt, namespace)
    with browser() as page:
        page.open(served_to_viewer.at(f"#/crs/{namespace}/{name}"))
        page.wait("return document.querySelectorAll('button.cell').length === 6")
        assert cells(page)["prod-2"] == "Unreachable · ClusterUnreachable"
        live = mgmt.get(CRS_API, "ClusterResourceSetBinding", "prod-1", namespace)
        assert live is not None
        live["spec"] = binding(namespace, "prod-1", name, "Applied", None, HASH, "")["spec"]
        mgmt.update(live)
        page.wait(
            "return document.querySelector(\"button.cell[data-key$='/prod-1']\")"
            ".textContent.endsWith('Ready')"
        )
    process = served_to_viewer.process
    assert process.poll() is None  # still serving, after the edit
    process.terminate()
    process.wait(30)
    # Its watches, ended, are in the audit log, after every request it made before.
    watches = {("watch", kind, "") for kind in WATCHED}
    wait_for(
        lambda: watches <= set(requests_of(control_plane, viewer)),
        TIMEOUT,
        message=f"its watches in the audit log: {sorted(set(requests_of(control_plane, viewer)))}",
    )
    assert [r for r in requests_of(control_plane, viewer) if r[0] not in READ] == []
    assert "forbidden" not in served_to_viewer.stderr.read_text().lower()


def secret_set(mgmt: TestbedClient, namespace: str, marker: str) -> tuple[str, str]:
    """A paused CRS whose resource is a Secret that follows the Kubernetes version (so
    the command reads it, to hash it as the controller does), its content holding
    ``marker``; two clusters with records of it (one applied, one failed). The CRS's
    and the Secret's names."""
    name, source = unique("creds"), unique("vcenter")
    content = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "vcenter-credentials", "namespace": "kube-system"},
        "stringData": {"password": marker},
    }
    mgmt.create(source_secret(namespace, source, {"creds.yaml": manifests(content)}))
    crs = crs_obj(namespace, name, [], {"creds": "on"}, "Reconcile")
    crs["spec"]["resources"] = [{"kind": "Secret", "name": source, "kubernetesVersions": V1_30}]
    crs["metadata"]["annotations"] = {PAUSED_ANNOTATION: "true"}
    mgmt.create(crs)
    for cluster, reason, message in [
        ("creds-1", "Applied", ""),
        ("creds-2", "ApplyFailed", f"Secret {source}: admission webhook denied it"),
    ]:
        meta = {"name": cluster, "namespace": namespace, "labels": {"creds": "on"}}
        mgmt.create({"apiVersion": CLUSTER_API, "kind": "Cluster", "metadata": meta, "spec": {}})
        record = binding(namespace, cluster, name, reason, None, HASH, message, ("Secret", source))
        mgmt.create(record)
    return name, source


def forms(marker: str) -> list[str]:
    """``marker`` and its base64 at each of the three alignments it can have inside
    longer content (the characters that depend on it alone)."""
    found = [marker]
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + marker.encode()).decode()
        found.append(encoded[4 if shift else 0 : -4])
    return found


def snapshot(http: httpx.Client, holding: str) -> bytes | None:
    """The page's live feed up to the end of its first event, the snapshot, once it
    holds ``holding``."""
    body = b""
    with http.stream("GET", "/events") as answer:
        for chunk in answer.iter_bytes():
            body += chunk
            if b"\n\n" in body:
                break
    return body if holding.encode() in body else None


def test_no_secret_content_reaches_the_page(
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    namespace: str,
    viewer: str,
    served_to_viewer: Dashboard,
) -> None:
    """The command reads a Secret to hash it; nothing of its content is in the feed,
    in a binding's record or in the page drawn."""
    marker = unique("secret-content-marker")
    name, source = secret_set(mgmt, namespace, marker)
    stored = (mgmt.get("v1", "Secret", source, namespace) or {})["data"]["creds.yaml"]
    hidden = [*forms(marker), stored]
    assert any(form in stored for form in forms(marker)[1:])  # the forms find it stored
    wait_for(
        lambda: ("get", "secrets", source) in requests_of(control_plane, viewer),
        TIMEOUT,
        message="the command's read of the Secret in the audit log",
    )
    with served_to_viewer.client() as http:
        feed = wait_for(
            lambda: snapshot(http, f"{namespace}/{name}/creds-2"),
            TIMEOUT,
            message="the CRS's cells in the feed",
        )
        records = []
        for cluster in ("creds-1", "creds-2"):
            query = {"namespace": namespace, "cluster": cluster, "crs": name}
            answer = http.get("/record", params=query)
            assert answer.status_code == 200
            assert answer.json()["resources"][0]["name"] == source
            records.append(answer.content)
    with browser() as page:
        page.open(served_to_viewer.at(f"#/crs/{namespace}/{name}"))
        page.wait("return document.querySelectorAll('button.cell').length === 2")
        pages = [page.run("return document.documentElement.outerHTML")]
        for cluster in ("creds-1", "creds-2"):
            page.run(f"document.querySelector(\"button.cell[data-key$='/{cluster}']\").click()")
            page.wait(
                "const d = document.getElementById('detail');"
                "return !d.hidden && d.innerText.includes(arguments[0]) &&"
                " d.innerText.includes('outcome')",
                cluster,
            )
            pages.append(page.run("return document.documentElement.outerHTML"))
        page.run(f"location.hash = '#/cluster/{namespace}/creds-2'")
        page.wait("return document.querySelector('table.cluster tbody tr')")
        pages.append(page.run("return document.documentElement.outerHTML"))
    shown = [feed, *records, *(text.encode() for text in pages)]
    leaks = [(form, n) for form in hidden for n, seen in enumerate(shown) if form.encode() in seen]
    assert leaks == []
    assert "forbidden" not in served_to_viewer.stderr.read_text().lower()
