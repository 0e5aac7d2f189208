"""Per-cluster values: a resource with ``substitute: true`` is parsed once for all
clusters (engine/sources) and substituted per cluster on the parsed objects
(core/substitute), never as text. Its hash on a cluster covers the content and the
values it used, so a Cluster whose used value changes gets that resource again, and
only that cluster."""

from __future__ import annotations

from dataclasses import dataclass

from crs_controller.core.hashing import object_hash
from crs_controller.core.models import SourceRef
from crs_controller.core.objects import CRS, Cluster
from crs_controller.core.substitute import VariableSpec, cluster_values, substitute, values_digest
from crs_controller.engine.sources import Manifest, Source, Sources


@dataclass(frozen=True)
class Prepared:
    """What one resource is on one cluster: its hash there, and (once asked for) its
    objects in apply order."""

    digest: str
    manifest: Manifest | None = None  # None: the source's own, verbatim


def source_hash(recorded: str) -> str:
    """The source's part of a recorded hash (a substituted resource records
    ``<source hash>+<values digest>``)."""
    return recorded.split("+", 1)[0]


async def prepare(sources: Sources, crs: CRS, cluster: Cluster, source: Source) -> Prepared:
    """Raises UnresolvedVariable or InvalidManifest (malformed reference) for this
    cluster alone."""
    ref = source.ref
    if not (isinstance(ref, SourceRef) and ref.substitute):
        return Prepared(source.hash)
    manifest = await sources.manifest(source)
    specs = variable_specs(crs)
    values = cluster_values(cluster.raw, specs)
    objects, used = substitute(
        manifest.objects,
        values,
        resource=f"{ref.kind}/{ref.name}",
        variables=specs,
        secret=ref.kind == "Secret",
    )
    hashes = tuple(object_hash(obj) for obj in objects)
    digest = f"{source.hash}+{values_digest(used, values)}"
    return Prepared(digest, Manifest(tuple(objects), hashes))


def variable_specs(crs: CRS) -> list[VariableSpec]:
    specs = []
    for variable in crs.valid.spec.variables:
        origin = variable.value_from
        specs.append(
            VariableSpec(
                name=variable.name,
                value=variable.value,
                cluster_field=origin.cluster_field if origin else None,
                topology_variable=origin.topology_variable if origin else None,
                default=variable.default,
            )
        )
    return specs
