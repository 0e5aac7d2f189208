"""The real add-on manifests some tests read (Calico, kindnet, the vSphere CPI builds,
Velero's CRD): data kept beside the repository, not in it, in its parent's
``shared/data/addons``. Where a checkout has no such folder, the tests that read it
skip, saying where they looked."""

from __future__ import annotations

from pathlib import Path

import pytest

ADDONS = Path(__file__).resolve().parents[2] / "shared" / "data" / "addons"

needs_addons = pytest.mark.skipif(
    not ADDONS.is_dir(), reason=f"the shared add-on data is not on this machine: no {ADDONS}"
)
