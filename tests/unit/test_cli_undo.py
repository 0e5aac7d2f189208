"""``history`` and ``rollback`` over a CRS as the API server would hand it over (the
client replaced): ``history -o yaml`` prints status.history with the revision rolled
out marked, and ``rollback`` refuses a CRS not in mode Reconcile, writing nothing."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from crs_controller.app.cli import main
from crs_controller.app.commands import history, rollback
from crs_controller.core.api.models import API_VERSION
from crs_controller.core.spec.objects import CRS, parse_crs

OLD, NOW = "xxh3:00000000000000aa", "xxh3:00000000000000bb"
HISTORY = [
    {"revision": OLD, "firstSeen": "2026-11-28T10:00:00Z", "outcome": "Complete"},
    {"revision": NOW, "firstSeen": "2026-11-28T11:00:00Z", "outcome": "Complete"},
]


def crs_of(mode: str) -> CRS:
    return parse_crs(
        {
            "apiVersion": API_VERSION,
            "kind": "ClusterResourceSet",
            "metadata": {"name": "cni", "namespace": "fleet", "uid": "u1"},
            "spec": {
                "clusterSelector": {"matchLabels": {"env": "prod"}},
                "resources": [{"kind": "ConfigMap", "name": "cni"}],
                "mode": mode,
            },
            "status": {"revision": NOW, "history": HISTORY},
        }
    )


class Client:
    """The management cluster's client, refusing every request: nothing is written."""

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"unexpected read {args}")

    async def close(self) -> None:
        pass


def served(monkeypatch: pytest.MonkeyPatch, module: Any, crs: CRS) -> None:
    async def get_crs(client: Any, namespace: str, name: str) -> CRS:
        assert (namespace, name) == ("fleet", "cni")
        return crs

    monkeypatch.setattr(module, "management", lambda args: Client())
    monkeypatch.setattr(module, "get_crs", get_crs)


def test_history_as_yaml_lists_the_revisions_and_marks_the_one_rolled_out(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served(monkeypatch, history, crs_of("Reconcile"))
    assert main(["history", "cni", "-n", "fleet", "-o", "yaml"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown == [HISTORY[0], {**HISTORY[1], "now": "rolledOut"}]


def test_rollback_refuses_a_crs_not_in_mode_reconcile(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served(monkeypatch, rollback, crs_of("ApplyOnce"))
    assert main(["rollback", "cni", "-n", "fleet"]) == 2
    said = capsys.readouterr()
    assert "ClusterResourceSet fleet/cni: a rollback needs mode: Reconcile" in said.err
    assert said.out == ""
