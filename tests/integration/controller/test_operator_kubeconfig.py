"""The operator's own kubeconfig on the real servers: `status`, `diff` and `run`
through a user that is an exec plugin (a small script printing an ExecCredential with
the test bed's client certificate, or a ServiceAccount token), the credential kept
until it expires and fetched again once it has (the script counts its runs), a
refused credential fetched again and the request retried, a new client certificate
used on new connections, a missing plugin named with its installHint, Always without
a terminal refused; and $KUBECONFIG=a:b merged so that --context names a context of b.

A tenant's workload kubeconfig with ``exec`` is still refused (UnsupportedKubeconfig,
the plugin never run): test_hostile_input.py::
test_kubeconfigs_that_ask_for_too_much_are_refused_naming_the_field, and
tests/unit/test_kubeconfig.py::test_user_fields_that_run_read_or_impersonate_are_refused.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from crs_controller.app.cli import main
from crs_controller.testbed import ControlPlane, Server, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    TIMEOUT,
    add_cluster,
    configmap_obj,
    crs_obj,
    manifests,
    requests_by,
    source_configmap,
    unique,
    wait_condition,
)

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"
ADMINS = ("system:masters",)
LEASE_API = "coordination.k8s.io/v1"

# Prints the ExecCredential of its run (the answers cycle), with an
# expirationTimestamp ``lifetime`` seconds from now; each run adds a line to the log.
PLUGIN = """\
import datetime, json, os, sys
log = os.environ["PLUGIN_LOG"]
with open(log, "a") as out:
    out.write(json.dumps({
        "stdin": os.path.realpath("/proc/self/fd/0"),
        "info": json.loads(os.environ["KUBERNETES_EXEC_INFO"]),
        "args": sys.argv[1:],
    }) + "\\n")
with open(log) as done:
    runs = len(done.readlines())
with open(os.environ["PLUGIN_ANSWERS"]) as given:
    answers = json.load(given)
answer = answers[(runs - 1) % len(answers)]
status = dict(answer["status"])
if answer.get("lifetime") is not None:
    at = datetime.datetime.now(datetime.timezone.utc)
    at += datetime.timedelta(seconds=answer["lifetime"])
    status["expirationTimestamp"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
print(json.dumps({"apiVersion": os.environ["PLUGIN_API"], "kind": "ExecCredential",
                  "status": status}))
"""


class Plugin:
    """An exec plugin in a folder of its own: its answers, and the log of its runs."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(exist_ok=True)
        self.directory = directory
        self.command = directory / "bin" / "crs-test-credential"
        self.command.parent.mkdir()
        self.command.write_text(f"#!{sys.executable}\n{PLUGIN}")
        self.command.chmod(0o700)
        self.answers = directory / "answers.json"
        self.log = directory / "runs.log"

    def answer(self, *answers: dict[str, Any]) -> None:
        self.answers.write_text(json.dumps(answers))
        self.answers.chmod(0o600)  # holds client keys and tokens

    def runs(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def kubeconfig(
        self,
        server: Server,
        path: Path,
        *,
        api_version: str = V1,
        mode: str | None = "Never",
        command: str = "bin/crs-test-credential",  # relative to the kubeconfig's folder
        install_hint: str | None = None,
        context: str = "exec",
    ) -> Path:
        plugin: dict[str, Any] = {
            "apiVersion": api_version,
            "command": command,
            "args": ["--cluster", server.name],
            "env": [
                {"name": "PLUGIN_LOG", "value": str(self.log)},
                {"name": "PLUGIN_ANSWERS", "value": str(self.answers)},
                {"name": "PLUGIN_API", "value": api_version},
            ],
            "provideClusterInfo": True,
        }
        if mode:
            plugin["interactiveMode"] = mode
        if install_hint:
            plugin["installHint"] = install_hint
        cluster = server.kubeconfig()["clusters"][0]["cluster"]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "mgmt", "cluster": cluster}],
            "users": [{"name": "exec-user", "user": {"exec": plugin}}],
            "contexts": [{"name": context, "context": {"cluster": "mgmt", "user": "exec-user"}}],
            "current-context": context,
        }
        path.write_text(yaml.safe_dump(config))
        return path


def certificate(server: Server, user: str, lifetime: float | None) -> dict[str, Any]:
    pair = server.client_cert(user, ADMINS)
    status = {
        "clientCertificateData": pair.cert_pem.decode(),
        "clientKeyData": pair.key_pem.decode(),
    }
    return {"status": status, "lifetime": lifetime}


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[Plugin]:
    found = Plugin(tmp_path)
    yield found
    found.answers.unlink(missing_ok=True)  # client keys are not left behind


@pytest.fixture
def crs(
    controller: ControllerProcess, mgmt: TestbedClient, workloads: list[Server], namespace: str
) -> str:
    """A CRS applied to a cluster by the session's controller: something for `status`
    to show and `diff` to compare."""
    name = unique("opk")
    mgmt.create(source_configmap(namespace, "src", {"a": manifests(configmap_obj(name))}))
    mgmt.create(crs_obj(namespace, "opk", [("ConfigMap", "src")], {"opk": "1"}))
    add_cluster(mgmt, workloads[0], namespace, "c1", {"opk": "1"})
    wait_condition(mgmt, namespace, "opk", "Ready", "True", "Applied")
    return "opk"


def cli(kubeconfig: Path, *args: str) -> list[str]:
    return [*args, "--kubeconfig", str(kubeconfig)]


def test_status_and_diff_through_an_exec_plugin_fetch_the_credential_once(
    control_plane: ControlPlane,
    crs: str,
    namespace: str,
    plugin: Plugin,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = control_plane.management
    plugin.answer(certificate(server, "exec-admin", lifetime=3600))
    kubeconfig = plugin.kubeconfig(server, tmp_path / "kubeconfig")

    assert main(cli(kubeconfig, "status", crs, "-n", namespace)) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "c1" in out and "Applied" in out
    # Every request of the command used the one credential: cached until it expires.
    assert len(plugin.runs()) == 1
    diff = cli(kubeconfig, "diff", crs, "--cluster", "c1", "-n", namespace)
    assert main(diff) == 0, capsys.readouterr().err
    assert capsys.readouterr().out == ""
    runs = plugin.runs()
    assert len(runs) == 2  # a new command, a new client: one run each
    first = runs[0]
    assert first["stdin"] == "/dev/null"  # interactiveMode Never
    assert first["args"] == ["--cluster", server.name]
    assert first["info"]["apiVersion"] == V1
    assert first["info"]["spec"]["interactive"] is False
    cluster = first["info"]["spec"]["cluster"]  # provideClusterInfo
    assert cluster["server"] == server.url
    assert base64.b64decode(cluster["certificate-authority-data"]) == server.ca_pem


def test_an_expired_credential_is_fetched_again_with_its_new_certificate(
    control_plane: ControlPlane,
    crs: str,
    namespace: str,
    plugin: Plugin,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = control_plane.management
    users = (unique("exec-one"), unique("exec-two"))
    # Already expired when printed: every request needs a new one, and the two
    # answers alternate between two client certificates.
    plugin.answer(*(certificate(server, user, lifetime=-60) for user in users))
    kubeconfig = plugin.kubeconfig(server, tmp_path / "kubeconfig", api_version=V1BETA1)
    since = time.time() - 1
    assert main(cli(kubeconfig, "status", crs, "-n", namespace)) == 0, capsys.readouterr().err
    assert "Applied" in capsys.readouterr().out
    assert len(plugin.runs()) >= 2
    # Each new certificate was used on connections of its own: both identities show.
    seen = wait_for(
        lambda: (
            {u for u in users if requests_by([server], {u}, since, {"get", "list"})} == set(users)
        ),
        TIMEOUT,
        message="requests from both certificates in the audit log",
    )
    assert seen


def test_a_refused_credential_is_fetched_again_and_the_request_sent_once_more(
    control_plane: ControlPlane,
    crs: str,
    namespace: str,
    plugin: Plugin,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = control_plane.management
    # A token the server refuses (revoked, say) though its expiry is an hour away, then
    # a client certificate: the 401 runs the plugin again and the request is retried.
    plugin.answer(
        {"status": {"token": "revoked-token"}, "lifetime": 3600},
        certificate(server, "exec-admin", lifetime=3600),
    )
    kubeconfig = plugin.kubeconfig(server, tmp_path / "kubeconfig")
    assert main(cli(kubeconfig, "status", crs, "-n", namespace)) == 0, capsys.readouterr()
    assert "Applied" in capsys.readouterr().out
    assert len(plugin.runs()) == 2


def test_a_service_account_token_from_the_plugin_is_used(
    control_plane: ControlPlane,
    crs: str,
    mgmt: TestbedClient,
    namespace: str,
    plugin: Plugin,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    account = unique("exec-sa")
    mgmt.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": namespace},
        }
    )
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": account},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }
    mgmt.create(binding)
    try:
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
        answer = mgmt.http.post(path, json=request)
        answer.raise_for_status()
        status = answer.json()["status"]
        plugin.answer(
            {
                "status": {
                    "token": status["token"],
                    "expirationTimestamp": status["expirationTimestamp"],
                }
            }
        )
        kubeconfig = plugin.kubeconfig(server := control_plane.management, tmp_path / "kc")
        assert main(cli(kubeconfig, "status", crs, "-n", namespace)) == 0, capsys.readouterr()
        assert "Applied" in capsys.readouterr().out
        assert len(plugin.runs()) == 1
        user = f"system:serviceaccount:{namespace}:{account}"
        wait_for(lambda: requests_by([server], {user}, 0, {"get", "list"}), TIMEOUT)
    finally:
        mgmt.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", account)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as its own process with no terminal: stdin is /dev/null."""
    return subprocess.run(
        [sys.executable, "-m", "crs_controller", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_a_missing_plugin_is_named_with_its_install_hint(
    control_plane: ControlPlane, namespace: str, plugin: Plugin, tmp_path: Path
) -> None:
    hint = "The credential helper is not installed.\n\n  Get it from https://example.org/helper\n"
    kubeconfig = plugin.kubeconfig(
        control_plane.management,
        tmp_path / "kubeconfig",
        command="crs-test-no-such-credential-helper",
        install_hint=hint,
    )
    done = run_cli(*cli(kubeconfig, "status", "-n", namespace))
    assert done.returncode == 2, done
    assert done.stderr == (
        "crs-controller status: users[0].user.exec.command: crs-test-no-such-credential-helper"
        " not found; The credential helper is not installed. Get it from"
        " https://example.org/helper\n"
    )
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_always_interactive_without_a_terminal_is_refused_before_running_the_plugin(
    control_plane: ControlPlane, namespace: str, plugin: Plugin, tmp_path: Path
) -> None:
    plugin.answer(certificate(control_plane.management, "exec-admin", lifetime=3600))
    kubeconfig = plugin.kubeconfig(control_plane.management, tmp_path / "kc", mode="Always")
    done = run_cli(*cli(kubeconfig, "status", "-n", namespace))
    assert done.returncode == 2, done
    assert (
        "users[0].user.exec.interactiveMode is Always, but stdin is not a terminal" in done.stderr
    )
    assert plugin.runs() == []
    # IfAvailable without a terminal: run, with /dev/null as its stdin.
    kubeconfig = plugin.kubeconfig(control_plane.management, tmp_path / "kc", mode="IfAvailable")
    done = run_cli(*cli(kubeconfig, "status", "-n", namespace))
    assert done.returncode == 0, done.stderr
    assert [r["stdin"] for r in plugin.runs()] == ["/dev/null"]
    assert plugin.runs()[0]["info"]["spec"]["interactive"] is False


def test_kubeconfig_files_are_merged_and_context_names_one_in_the_second(
    control_plane: ControlPlane,
    crs: str,
    namespace: str,
    plugin: Plugin,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = control_plane.management
    plugin.answer(certificate(server, "exec-admin", lifetime=3600))
    first = control_plane.workloads[0].write_kubeconfig(tmp_path / "workload.kubeconfig")
    (tmp_path / "ops").mkdir()
    second = plugin.kubeconfig(server, tmp_path / "kubeconfig", context="ops-mgmt")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(second)]))
    # The first file's current-context is a workload cluster: no CRS there.
    assert main(["status", crs, "-n", namespace]) == 2
    capsys.readouterr()
    assert main(["status", crs, "-n", namespace, "--context", "ops-mgmt"]) == 0, capsys.readouterr()
    assert "Applied" in capsys.readouterr().out
    assert len(plugin.runs()) == 1


def test_run_reads_the_management_cluster_through_an_exec_plugin(
    control_plane: ControlPlane, mgmt: TestbedClient, namespace: str, plugin: Plugin
) -> None:
    server = control_plane.management
    # Short-lived: the Lease renewals (every second) go on past its expiry only with
    # new ones, fetched as the old one expires.
    plugin.answer(certificate(server, "exec-controller", lifetime=3))
    args = ("--namespace", namespace, "--leader-elect", "--leader-election-namespace", namespace)
    process = ControllerProcess(server, *args, "--lease-duration", "3s", stdin=subprocess.PIPE)
    plugin.kubeconfig(server, process.kubeconfig, mode="IfAvailable", command=str(plugin.command))
    with process:
        assert len(plugin.runs()) >= 1
        lease = wait_for(lambda: mgmt.list(LEASE_API, "Lease", namespace), TIMEOUT)[0]
        renewed = wait_for(lambda: len(plugin.runs()) >= 3, TIMEOUT, message="new credentials")
        assert renewed
        later = mgmt.get(LEASE_API, "Lease", lease["metadata"]["name"], namespace)
        assert later["spec"]["renewTime"] != lease["spec"]["renewTime"]
        assert later["spec"]["holderIdentity"] == lease["spec"]["holderIdentity"]
        assert {r["stdin"] for r in plugin.runs()} == {"/dev/null"}  # no terminal
    assert "PRIVATE KEY" not in process.log_text()
