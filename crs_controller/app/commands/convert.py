"""``crs-controller convert -f FILE...``: Cluster API's ClusterResourceSets as this
project's, every other document passed through, ready for ``kubectl apply -f -``.

What has no counterpart is named on stderr (one
``crs-controller convert: warning: ns/name: …`` line each)
and does not change the exit code; an input that cannot be read or converted is an
error (exit 2) and nothing is printed on stdout, so a pipe never applies half.
"""

from __future__ import annotations

import argparse
from typing import Any

from crs_controller.app.capi_convert import convert_documents
from crs_controller.app.commands.common import (
    OK,
    Subcommands,
    add_files,
    add_output,
    command_parser,
    dump_manifests,
    emit,
    guarded,
    read_documents,
    warn,
)

DESCRIPTION = """\
Convert Cluster API ClusterResourceSets (addons.cluster.x-k8s.io v1beta1 and v1beta2)
to addons.crs.dev/v1alpha1. Name, namespace, labels, annotations, the cluster
selector and the resources are kept; strategy becomes mode (none: ApplyOnce).
Cluster API's ClusterResourceSetBindings are left out; every other document passes
through unchanged, in order. Anything without a counterpart is named on stderr.
The ConfigMaps and Secrets (type addons.cluster.x-k8s.io/resource-set) work as
they are."""

EPILOG = """\
examples:
  # review the result, then apply it
  crs-controller convert -f cluster-resource-sets.yaml > converted.yaml

  # what Cluster API has in a namespace, straight into the new API
  kubectl get clusterresourcesets.addons.cluster.x-k8s.io -n fleet -o yaml \\
    | crs-controller convert -f - | kubectl apply -f -

  # every manifest of a directory (*.yaml, *.yml, *.json) and another file, as JSON
  crs-controller convert -f addons/ -f cni.yaml -o json

exit status: 0 converted (warnings included), 2 an input cannot be read or converted
"""


def register(sub: Subcommands) -> None:
    parser = command_parser(
        sub,
        "convert",
        DESCRIPTION,
        help="convert Cluster API ClusterResourceSets to this API",
        epilog=EPILOG,
    )
    add_files(parser)
    add_output(parser, "yaml", "json")
    parser.set_defaults(func=guarded("convert", run))


def run(args: argparse.Namespace) -> int:
    documents = [doc for _where, doc in read_documents(args.filename)]
    converted, warnings = convert_documents(documents)
    if args.output == "json":
        # A v1 List: what kubectl apply reads as a single JSON document.
        emit({"apiVersion": "v1", "kind": "List", "items": converted}, "json", str)
    else:
        print(yaml_stream(converted), end="")
    for warning in warnings:
        warn("convert", warning)
    return OK


def yaml_stream(documents: list[dict[str, Any]]) -> str:
    """One ``---`` document per object, keys in their order."""
    return dump_manifests(documents)
