"""The debug line of a binding write names what changed, never a value."""

from __future__ import annotations

from crs_controller.core.api.models import (
    BindingOutcome,
    ClusterResourceSetBinding,
    ClusterResourceSetBindingSpec,
    CRSBinding,
    ObjectMeta,
)
from crs_controller.engine.reconcile.recording import _what


def a_binding(*entries: CRSBinding) -> ClusterResourceSetBinding:
    return ClusterResourceSetBinding(
        metadata=ObjectMeta(name="c1", namespace="fleet"),
        spec=ClusterResourceSetBindingSpec(cluster_name="c1", bindings=list(entries)),
    )


def test_a_write_names_the_fields_it_changes_and_not_their_values() -> None:
    said = BindingOutcome(reason="Progressing", message="secret-looking text")
    before = a_binding(
        CRSBinding(cluster_resource_set_name="a", outcome=said),
        CRSBinding(cluster_resource_set_name="gone"),
    )
    moved = said.model_copy(update={"message": "other text"})
    after = a_binding(CRSBinding(cluster_resource_set_name="a", outcome=moved))
    changed = _what(before, after)
    assert changed == ["a: outcome.message", "gone: removed"]
    assert "text" not in str(changed)
    assert _what(None, after) == ["created"]
