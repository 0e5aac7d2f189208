"""The CLI decides on a Cluster the controller refuses (its labels over the bound,
``core.spec.metadata``) as the controller does: it is left alone, nothing applied
nor removed (engine/reconcile/cluster). ``diff`` shows no change there, only why;
``render --cluster`` refuses it (exit 2), naming the field, never a label."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from crs_controller.app.cli import main
from crs_controller.app.commands.common import dump_manifests
from crs_controller.app.commands.diff import _compare, _Target
from crs_controller.core.api.models import CRSBinding, ObjectRef, ResourceBinding
from crs_controller.core.manifests.hashing import resource_hash
from crs_controller.core.spec.metadata import MAX_LABELS
from crs_controller.core.spec.objects import parse_crs

from .builders import cluster, configmap_source, crs, payload
from .memory_kube import MemoryKube

# A selector a Cluster without labels matches: one refused must not pass for one.
UNLABELLED = {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}
SECRET_LABEL = "secret-label-value"


def refused_cluster(name: str = "c1") -> dict[str, Any]:
    raw = cluster(name)
    raw["metadata"]["labels"] = {f"k{i}": SECRET_LABEL for i in range(MAX_LABELS + 1)}
    return raw


async def test_diff_on_a_refused_cluster_removes_nothing() -> None:
    """The CRS recorded an object there and deletes what it applied: the controller
    deletes nothing of a refused Cluster, so neither does the diff show it removed."""
    source = configmap_source("src", payload("addon"))
    the_crs = parse_crs(crs("x", "src", deletionPolicy="Delete", clusterSelector=UNLABELLED))
    applied = ResourceBinding(
        kind="ConfigMap",
        name="src",
        hash=resource_hash(source),
        applied=True,
        objects=[ObjectRef("v1", "ConfigMap", "default", "addon")],
    )
    entry = CRSBinding(cluster_resource_set_name="x", resources=[applied])
    workload = MemoryKube("c1")
    await workload.apply(payload("addon"), field_manager="crs-controller")
    target = _Target(the_crs, refused_cluster(), entry, set())
    args = argparse.Namespace(cluster="c1", field_manager="crs-controller")
    report = await _compare(MemoryKube("management"), workload, target, args)
    assert report.changes == []
    (note,) = report.notes
    assert "Cluster default/c1 is refused: metadata.labels: more than 256 entries" in note
    assert "leaves it alone" in note and SECRET_LABEL not in note


def test_render_for_a_refused_cluster_is_exit_code_2_naming_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifests = tmp_path / "crs.yaml"
    source = configmap_source("src", payload("addon"))
    manifests.write_text(dump_manifests([crs("x", "src", clusterSelector=UNLABELLED), source]))
    the_cluster = tmp_path / "cluster.yaml"
    the_cluster.write_text(dump_manifests([refused_cluster()]))
    code = main(["render", "-f", str(manifests), "--cluster", str(the_cluster)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "Cluster c1 is refused: metadata.labels: more than 256 entries" in err
    assert SECRET_LABEL not in err and err.count("\n") == 1
