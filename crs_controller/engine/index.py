"""In-memory indexes over the informer caches: which CRS references which
ConfigMap/Secret, which Clusters a CRS selects. Rebuilt from the watches alone."""

from __future__ import annotations

from collections import OrderedDict, defaultdict

from pydantic import ValidationError

from crs_controller.clients.kube import Obj
from crs_controller.core.clusters import is_deleting, is_paused, labels_of
from crs_controller.core.errors import InvalidSpec
from crs_controller.core.models import ClusterResourceSet
from crs_controller.core.modes import strategy_for
from crs_controller.core.selectors import selector_matches, validate_selector
from crs_controller.engine.runtime.watching import Informer

SourceKey = tuple[str, str, str]  # namespace, kind, name


def referenced_sources(crs: Obj) -> set[SourceKey]:
    """Every ConfigMap/Secret a CRS reads, hook resources included."""
    namespace = crs["metadata"].get("namespace", "")
    spec = crs.get("spec") or {}
    refs = list(spec.get("resources") or [])
    refs += list((spec.get("uninstall") or {}).get("beforeDelete") or [])
    return {(namespace, str(r.get("kind")), str(r.get("name"))) for r in refs}


def selects(crs: Obj, cluster: Obj) -> bool:
    """True when the CRS's selector matches the Cluster (same namespace only)."""
    if crs["metadata"].get("namespace") != cluster["metadata"].get("namespace"):
        return False
    try:
        return selector_matches((crs.get("spec") or {}).get("clusterSelector"), labels_of(cluster))
    except InvalidSpec:
        return False


def active(crs: Obj) -> bool:
    """A CRS that should be applied: not being deleted, not paused, and a spec the
    model accepts."""
    return not is_deleting(crs) and not is_paused(crs) and spec_problem(crs) is None


def left_alone(crs: Obj) -> bool:
    """A CRS whose binding entries stay exactly as they are: paused, or a spec the
    model refuses (it harms nobody, and nothing it applied is touched)."""
    return is_paused(crs) or spec_problem(crs) is not None


_PARSED: OrderedDict[tuple[str, str], ClusterResourceSet | InvalidSpec] = OrderedDict()
_PARSED_SIZE = 4096


def crs_model(crs: Obj) -> ClusterResourceSet:
    """The CRS as the model reads it; raises ``InvalidSpec`` when the model refuses it
    (e.g. written before a CRD upgrade, or through a looser schema). Parsed once per
    object version, however many clusters and reconciles read it: uid and
    resourceVersion together name one content for good (a CRS deleted and created
    again under its name has a new uid)."""
    meta = crs.get("metadata") or {}
    uid = meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
    key = (str(uid), str(meta.get("resourceVersion")))
    parsed = _PARSED.get(key)
    if parsed is None:
        parsed = _parse_crs(crs)
        _PARSED[key] = parsed
        if len(_PARSED) > _PARSED_SIZE:
            _PARSED.popitem(last=False)
    if isinstance(parsed, InvalidSpec):
        raise parsed
    return parsed


def spec_problem(crs: Obj) -> InvalidSpec | None:
    """Why the model refuses this CRS, or None."""
    try:
        crs_model(crs)
    except InvalidSpec as exc:
        return exc
    return None


def _parse_crs(crs: Obj) -> ClusterResourceSet | InvalidSpec:
    try:
        model = ClusterResourceSet.model_validate(crs)
        validate_selector((crs.get("spec") or {}).get("clusterSelector"))
        strategy_for(model.spec.mode, model.spec.reapply_interval)
    except ValidationError as exc:
        return InvalidSpec(describe_validation(exc))
    except InvalidSpec as exc:  # a selector or a mode the API server would refuse too
        return exc
    return model


def describe_validation(exc: ValidationError) -> str:
    """Field paths and what is wrong, never the values (they are the tenant's)."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    parts = [".".join(str(p) for p in e["loc"]) + ": " + e["msg"] for e in errors[:5]]
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "invalid spec: " + "; ".join(parts) + more


class Index:
    def __init__(self, crss: Informer, clusters: Informer) -> None:
        self._crss = crss
        self._clusters = clusters
        self._refs: dict[SourceKey, set[str]] = defaultdict(set)

    def update_crs(self, old: Obj | None, new: Obj | None) -> None:
        for obj, add in ((old, False), (new, True)):
            if obj is None:
                continue
            name = obj["metadata"]["name"]
            for key in referenced_sources(obj):
                if add:
                    self._refs[key].add(name)
                else:
                    self._refs[key].discard(name)
                    if not self._refs[key]:
                        del self._refs[key]

    def referencing(self, namespace: str, kind: str, name: str) -> list[Obj]:
        names = self._refs.get((namespace, kind, name), set())
        found = (self._crss.get(namespace, n) for n in sorted(names))
        return [c for c in found if c is not None]

    def crss_in(self, namespace: str) -> list[Obj]:
        return sorted(
            (c for (ns, _), c in self._crss.store.items() if ns == namespace),
            key=lambda c: str(c["metadata"]["name"]),
        )

    def clusters_in(self, namespace: str) -> list[Obj]:
        return [c for (ns, _), c in self._clusters.store.items() if ns == namespace]

    def matching_clusters(self, crs: Obj) -> list[Obj]:
        namespace = crs["metadata"].get("namespace", "")
        return [c for c in self.clusters_in(namespace) if selects(crs, c)]

    def matching_crss(self, cluster: Obj) -> list[Obj]:
        namespace = cluster["metadata"].get("namespace", "")
        return [c for c in self.crss_in(namespace) if selects(c, cluster)]

    def crs(self, namespace: str, name: str) -> Obj | None:
        return self._crss.get(namespace, name)

    def cluster(self, namespace: str, name: str) -> Obj | None:
        return self._clusters.get(namespace, name)
