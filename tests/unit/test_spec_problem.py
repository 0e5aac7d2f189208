"""Which ClusterResourceSets the model refuses (``engine.index.spec_problem``): a spec
that passed a looser schema is an ``InvalidSpec`` naming the field, never the value;
a valid one has no problem; the verdict is cached per resourceVersion."""

from __future__ import annotations

from typing import Any

import pytest

from crs_controller.engine.index import active, left_alone, spec_problem

MARKER = "v4lue-9d1f0c"


def crs(rv: str = "1", **spec: Any) -> dict[str, Any]:
    body = {
        "clusterSelector": {"matchLabels": {"a": "b"}},
        "resources": [{"kind": "ConfigMap", "name": "x"}],
        **spec,
    }
    return {"metadata": {"name": "c", "namespace": "n", "resourceVersion": rv}, "spec": body}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"mode": MARKER}, "spec.mode"),
        ({"deletionPolicy": MARKER}, "spec.deletionPolicy"),
        ({"resources": [{"kind": MARKER, "name": "x"}]}, "spec.resources.0.kind"),
        ({"resources": []}, "spec.resources"),
        ({"driftCheckInterval": MARKER}, "spec.driftCheckInterval"),
    ],
)
def test_a_refused_spec_names_the_field_never_the_value(spec: dict[str, Any], field: str) -> None:
    problem = spec_problem(crs(rv=field, **spec))
    assert problem is not None and problem.reason == "InvalidSpec"
    assert field in str(problem)
    assert MARKER not in str(problem)


def test_a_valid_spec_has_no_problem_and_is_active() -> None:
    valid = crs(rv="valid")
    assert spec_problem(valid) is None
    assert active(valid) and not left_alone(valid)


def test_an_invalid_spec_is_left_alone_not_active() -> None:
    invalid = crs(rv="invalid", mode="Never")
    assert not active(invalid) and left_alone(invalid)


def test_a_reapply_interval_outside_reconcile_mode_is_invalid() -> None:
    problem = spec_problem(crs(rv="applyonce-interval", mode="ApplyOnce", reapplyInterval="5m"))
    assert problem is not None and "reapplyInterval" in str(problem)
