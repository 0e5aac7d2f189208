"""How a cluster stands for a ClusterResourceSet, in one word, as ``status`` and the
fleet page show it: read from the outcome its binding records (``status.outcome_of``,
the inverse of how the controller records it) and whether it is on the CRS's revision.

- ``Ready``: applied, its objects Ready, on the CRS's revision (or no revision known).
- ``Progressing``: applied and waiting for its objects to be Ready, or applied on an
  older revision that nothing holds back (the controller has yet to take it there).
- ``Waiting``: held back, the reason says by what: its rollout step (``Progressing``),
  a change window (``OutsideWindow``), the cluster itself (``UpdateHeld``), the update
  budget (``BudgetExhausted``), an upgrade (``UpgradeInProgress``), a CRS it depends on
  (``DependencyNotReady``) or the cluster's Kubernetes version.
- ``Unreachable``: its API server could not be reached (``ClusterUnreachable``).
- ``Failed``: any other failure; the reason names it.
- ``Pending``: nothing recorded yet, or the cluster is not ready to be contacted.
"""

from __future__ import annotations

from typing import Literal

from crs_controller.core.api.models import CRSBinding
from crs_controller.core.errors import Unreachable
from crs_controller.core.state.status import outcome_of

ClusterState = Literal["Ready", "Progressing", "Waiting", "Unreachable", "Failed", "Pending"]
# In the order a person steering a rollout reads them: the trouble first.
CLUSTER_STATES: tuple[ClusterState, ...] = (
    "Failed",
    "Unreachable",
    "Waiting",
    "Progressing",
    "Pending",
    "Ready",
)


def cluster_state(entry: CRSBinding | None, current: bool | None) -> ClusterState:
    """The state of the cluster whose binding records ``entry`` for the CRS;
    ``current``: whether it is on the CRS's revision (None: not known)."""
    outcome = outcome_of(entry)
    if outcome is None or outcome.state == "Pending":
        return "Pending"
    if outcome.state == "Failed":
        return "Unreachable" if outcome.reason == Unreachable.reason else "Failed"
    if outcome.state == "Applied":
        return "Ready" if outcome.ready and current is not False else "Progressing"
    return "Waiting"
