"""The image, built and run by the project.

Covers: ``hack/build-image.sh`` builds the Dockerfile (with buildah: no daemon; on an
equivalent Debian base where the default base cannot be pulled); the image runs as
65532:65532 with the entrypoint, command and ports the manifests expect, and holds no
pip, setuptools, compiler or pip configuration; ``crs-controller run`` started from the
image's file system (``buildah run``, chroot isolation, the host's network so the test
bed on loopback is reachable) applies the sample ClusterResourceSet (config/samples) to
a workload server, reports it Ready, and stops cleanly on SIGTERM. It runs against a
management and a workload server of its own: the session's may have another controller
watching every namespace. That the process in the image did it is
read from the workload objects' managedFields (a field manager no other process is
given), and that it ran as 65532 from the image from /proc (uid, root, executable).

Needs buildah and root (hack/setup.sh installs buildah and mmdebstrap when run as root
on Debian); skipped with the reason otherwise. The build runs once for the module:
about 45 s with the Debian base built, 15 s once it is cached.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.clusters import install_crds, register_cluster
from crs_controller.testbed.controller import SA_GROUPS, SA_USER, install_rbac

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "config" / "samples"
# Ours and the minimal Cluster API Cluster CRD, as tests/conftest.py installs them.
CRDS = sorted((ROOT / "config" / "crd" / "bases").glob("*.yaml")) + sorted(
    (ROOT / "config" / "testing").glob("*.yaml")
)
IMAGE = "localhost/crs-controller:integration-test"
NONROOT = 65532
BUILD_TIMEOUT = 900.0
TIMEOUT = 60.0
# What the sample ClusterResourceSet applies to a Cluster labelled crs-demo=true.
SAMPLE_OBJECTS = (
    ("v1", "Namespace", "demo-addon", None),
    ("v1", "ConfigMap", "demo-settings", "demo-addon"),
    ("v1", "ServiceAccount", "demo-agent", "demo-addon"),
    ("v1", "ConfigMap", "demo-from-secret", "demo-addon"),
)
# Where the management kubeconfig is mounted in the container.
CONFIG_DIR = "/etc/crs-controller/test"


def _why_not() -> str | None:
    if shutil.which("buildah") is None:
        return (
            "buildah is not installed: this test builds the image and runs it without a "
            "daemon with buildah (apt-get install buildah mmdebstrap; hack/setup.sh does "
            "it as root on Debian)"
        )
    if os.geteuid() != 0:
        return "runs the image with buildah as root (chroot isolation); not root here"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")


def _buildah(*args: str, timeout: float = TIMEOUT) -> str:
    result = subprocess.run(
        ["buildah", *args],
        # chroot needs no OCI runtime, cgroup or rlimit rights (CI machines lack some).
        env={**os.environ, "BUILDAH_ISOLATION": "chroot"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, (
        f"buildah {' '.join(args)} exited {result.returncode}:\n{result.stderr[-3000:]}"
    )
    return result.stdout


@pytest.fixture(scope="module")
def image() -> str:
    """The image, built once for the module by the project's own script."""
    result = subprocess.run(
        ["bash", "hack/build-image.sh", "--builder", "buildah", "-t", IMAGE],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, f"hack/build-image.sh failed:\n{result.stderr[-4000:]}"
    assert result.stdout.splitlines()[-1] == f"buildah {IMAGE}"
    return IMAGE


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[str]:
    """A working container of the image: ``buildah run`` runs commands in its file system."""
    name = f"crs-image-test-{uuid.uuid4().hex[:8]}"
    _buildah("from", "--quiet", "--pull-never", "--name", name, image)
    yield name
    _buildah("rm", name)


@pytest.fixture(scope="module")
def test_bed() -> Iterator[tuple[ControlPlane, TestbedClient]]:
    """A management and a workload server of the module's own, with the CRDs and the
    controller's RBAC: the session's test bed may have a controller of its own running
    (the controller tests'), which would apply the sample before the image's could."""
    with ControlPlane.start(workloads=1) as plane, TestbedClient(plane.management) as mgmt:
        install_crds(mgmt, CRDS)
        install_rbac(mgmt)
        yield plane, mgmt


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ImageController:
    """``crs-controller run`` from the image: ``buildah run`` on the host's network,
    with the management kubeconfig (the controller's ServiceAccount identity, so
    exactly config/rbac) mounted read-only and readable by the image's user only."""

    def __init__(self, container: str, kubeconfig: dict[str, Any], *args: str) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="crs-image-"))
        self._config = self._root / "config"
        self._config.mkdir()
        path = self._config / "kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig))
        path.chmod(0o600)
        for owned in (self._config, path):
            os.chown(owned, NONROOT, NONROOT)
        self.log_path = self._root / "controller.log"
        self.port = _free_port()
        self._argv = [
            *("buildah", "run", "--isolation", "chroot", "--network", "host"),
            *("-v", f"{self._config}:{CONFIG_DIR}:ro", "-e", "POD_NAMESPACE=crs-system"),
            *(container, "--", "crs-controller", "run"),
            *("--kubeconfig", f"{CONFIG_DIR}/kubeconfig", "--log-format", "json"),
            *("--health-addr", f"127.0.0.1:{self.port}", "--metrics-addr", "0", *args),
        ]
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ImageController:
        with self.log_path.open("wb") as log:
            # A session of its own: its process group holds only what this test started.
            self._proc = subprocess.Popen(
                self._argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(self._ready, TIMEOUT, message="the controller in the image ready")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self._config, ignore_errors=True)  # it holds a client key

    def _ready(self) -> bool:
        assert self._proc is not None
        if self._proc.poll() is not None:
            raise AssertionError(f"buildah run exited {self._proc.returncode}:\n{self.log()}")
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def pid(self) -> int:
        """The controller's own process, chrooted and run with our port (buildah's
        chroot helper, its parent, shows the same arguments)."""
        marker = f"127.0.0.1:{self.port}".encode()
        for entry in Path("/proc").iterdir():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                chrooted = os.readlink(entry / "root") != "/"
            except (OSError, ValueError):
                continue  # not a process, or gone
            if chrooted and marker in argv and argv[0] != b"buildah-chroot-exec":
                return int(entry.name)
        raise AssertionError(f"no process of the image's controller found:\n{self.log()}")

    def stop(self) -> int | None:
        """SIGTERM to the controller in the image, as a kubelet sends; buildah run then
        exits with its code. SIGKILL to our process group if it does not."""
        if self._proc is None or self._proc.poll() is not None:
            return None if self._proc is None else self._proc.returncode
        os.kill(self.pid(), signal.SIGTERM)
        try:
            return self._proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
            raise

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _process_facts(pid: int) -> dict[str, Any]:
    """Who the process runs as and from which file system, read from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    ids = {line.split(":")[0]: line.split()[1:] for line in status.splitlines()}
    return {
        "uid": [int(i) for i in ids["Uid"]],
        "gid": [int(i) for i in ids["Gid"]],
        "root": os.readlink(f"/proc/{pid}/root"),
        "exe": os.readlink(f"/proc/{pid}/exe"),
        "argv": Path(f"/proc/{pid}/cmdline").read_text().split("\0")[:3],
    }


def _samples() -> list[dict[str, Any]]:
    """config/samples as its kustomization lists them, in that order."""
    kustomization = yaml.safe_load((SAMPLES / "kustomization.yaml").read_text())
    return [
        doc
        for name in kustomization["resources"]
        for doc in yaml.safe_load_all((SAMPLES / name).read_text())
        if doc
    ]


def _ready(mgmt: TestbedClient) -> bool:
    crs = mgmt.get("addons.crs.dev/v1alpha1", "ClusterResourceSet", "demo", "default") or {}
    for cond in crs.get("status", {}).get("conditions", []):
        if cond["type"] == "Ready":
            return bool(cond["status"] == "True" and cond.get("reason") == "Applied")
    return False


def _managed_by(client: TestbedClient, ref: tuple[str, str, str, str | None], manager: str) -> bool:
    api_version, kind, name, namespace = ref
    obj = client.get(api_version, kind, name, namespace) or {}
    fields = obj.get("metadata", {}).get("managedFields") or []
    return any(f.get("manager") == manager and f.get("operation") == "Apply" for f in fields)


def test_the_image_runs_as_nonroot_without_build_tools(image: str, container: str) -> None:
    config = json.loads(_buildah("inspect", "--type", "image", image))["OCIv1"]["config"]
    assert config["User"] == f"{NONROOT}:{NONROOT}"
    assert set(config["ExposedPorts"]) == {"8080/tcp", "8081/tcp", "9443/tcp"}
    assert (config["Entrypoint"], config["Cmd"]) == (["crs-controller"], ["run"])
    # buildah run takes the image's user, as a container runtime does.
    assert _buildah("run", container, "--", "id", "-u").strip() == str(NONROOT)
    probe = (
        "import importlib.util, json, shutil, os;"
        "print(json.dumps([[m for m in ('pip', 'setuptools') if importlib.util.find_spec(m)],"
        " [t for t in ('gcc', 'cc', 'make') if shutil.which(t)], os.path.exists('/etc/pip.conf')]))"
    )
    build_tools, compilers, pip_conf = json.loads(
        _buildah("run", container, "--", "python3", "-c", probe)
    )
    assert (build_tools, compilers, pip_conf) == ([], [], False)
    help_text = _buildah("run", container, "--", "crs-controller", "--help")
    assert "usage: crs-controller" in help_text


def test_the_controller_in_the_image_applies_the_sample(
    container: str, test_bed: tuple[ControlPlane, TestbedClient]
) -> None:
    plane, mgmt = test_bed
    # Only the process in the image is given this field manager: an object it names
    # was applied by that process.
    manager = f"crs-controller-image-{uuid.uuid4().hex[:6]}"
    register_cluster(
        mgmt, plane.workloads[0], name="image", namespace="default", labels={"crs-demo": "true"}
    )
    for doc in _samples():
        mgmt.apply(doc)
    kubeconfig = plane.management.kubeconfig(SA_USER, SA_GROUPS)
    args = ("--field-manager", manager)
    with (
        ImageController(container, kubeconfig, *args) as controller,
        TestbedClient(plane.workloads[0]) as workload,
    ):
        for ref in SAMPLE_OBJECTS:
            wait_for(
                functools.partial(_managed_by, workload, ref, manager),
                TIMEOUT,
                message=f"{ref[1]} {ref[2]} applied by the controller in the image",
            )
        wait_for(functools.partial(_ready, mgmt), TIMEOUT, message="the sample CRS Ready")
        facts = _process_facts(controller.pid())
        code = controller.stop()
    assert facts["uid"] == [NONROOT] * 4 and facts["gid"] == [NONROOT] * 4, facts
    # The interpreter and the program both come from the image's file system.
    assert facts["root"] != "/" and facts["exe"].startswith(facts["root"] + "/"), facts
    assert facts["argv"][1:] == ["/opt/venv/bin/crs-controller", "run"], facts
    log = controller.log()
    assert code == 0, log[-3000:]
    assert "Traceback" not in log and "PRIVATE KEY" not in log
