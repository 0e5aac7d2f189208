"""`diff` never prints a Secret's values (``app.commands.diff``): as kubectl diff, each
value of data and stringData (and kubectl's last-applied annotation) is a mask, the
same on both sides when the value did not change and "*** (before)" / "*** (after)"
when it did, so the diff says which keys changed; other kinds are shown whole."""

from __future__ import annotations

import copy
from typing import Any

from crs_controller.app.commands.diff import _unified
from crs_controller.core.manifests.documents import ObjectRef

SECRET = ObjectRef("v1", "Secret", "kube-system", "creds")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def secret(password: str, **more: Any) -> dict[str, Any]:
    meta = {"name": "creds", "namespace": "kube-system", "annotations": {"team": "net"}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "data": {"password": password, "user": "YWRtaW4="},
        **more,
    }


def test_a_changed_value_shows_as_a_changed_mask_never_itself() -> None:
    live = secret("b2xkLXNlY3JldA==", stringData={"token": "live-token"})
    live["metadata"]["annotations"][LAST_APPLIED] = '{"data":{"password":"b2xkLXNlY3JldA=="}}'
    applied = secret("bmV3LXNlY3JldA==", stringData={"token": "new-token", "extra": "e-value"})
    kept = copy.deepcopy((live, applied))
    chunk = _unified(SECRET, live, applied)
    for value in ("b2xkLXNlY3JldA==", "bmV3LXNlY3JldA==", "YWRtaW4=", "-token", "e-value"):
        assert value not in chunk
    assert "-  password: '*** (before)'" in chunk
    assert "+  password: '*** (after)'" in chunk
    assert "+  extra: '***'" in chunk
    assert "user: '***'" in chunk and "-  user" not in chunk  # unchanged: no change
    assert f"-    {LAST_APPLIED}: '***'" in chunk
    assert (live, applied) == kept  # the objects themselves are left as they were


def test_a_secret_the_same_on_both_sides_is_no_change() -> None:
    assert _unified(SECRET, secret("c2FtZQ=="), secret("c2FtZQ==")) == ""


def test_a_removed_or_created_secret_shows_only_masks() -> None:
    removed = _unified(SECRET, secret("b2xk"), None)
    created = _unified(SECRET, None, secret("bmV3"))
    assert "b2xk" not in removed and "-  password: '***'" in removed
    assert "bmV3" not in created and "+  password: '***'" in created


def test_other_kinds_are_shown_whole() -> None:
    ref = ObjectRef("v1", "ConfigMap", "kube-system", "cfg")
    live = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {}}
    applied = {**live, "data": {"password": "visible"}}
    assert "+  password: visible" in _unified(ref, live, applied)
