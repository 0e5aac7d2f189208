"""``crs-controller hash -f FILE...``: the hash the controller computes and records
in the bindings for each ConfigMap and Secret in some manifests (metadata aside:
the same content under another name has the same hash).

Every document is read (files, directories, '-' for stdin, as ``-f`` takes them
everywhere); the ConfigMaps and Secrets are hashed, other kinds are passed over.
One source prints its hash alone, several print one ``HASH  KIND/NAMESPACE/NAME``
line each, like sha256sum. A source the controller would refuse is an error
(exit 2), and nothing is printed on stdout.
"""

from __future__ import annotations

import argparse

from crs_controller.app.commands.common import (
    OK,
    Obj,
    Subcommands,
    UsageError,
    add_files,
    add_output,
    command_parser,
    emit,
    guarded,
    metadata,
    object_name,
    printable,
    read_documents,
)
from crs_controller.core.errors import CRSError
from crs_controller.core.manifests.hashing import resource_hash

SOURCE_KINDS = ("ConfigMap", "Secret")

EPILOG = """\
examples:
  crs-controller hash -f calico-configmap.yaml
  crs-controller convert -f cluster-resource-sets.yaml | crs-controller hash -f -
  kubectl get cm calico -o yaml | crs-controller hash -f - -o json

The positional form (crs-controller hash FILE) still works: it is the same as -f.

exit status: 0 hashed, 2 an input cannot be read or a source would be refused
"""


def register(sub: Subcommands) -> None:
    parser = command_parser(
        sub,
        "hash",
        __doc__,
        help="print the hash of each ConfigMap/Secret in manifests, as the bindings record it",
        epilog=EPILOG,
    )
    add_files(parser, required=False)
    parser.add_argument("file", nargs="*", metavar="FILE", help=argparse.SUPPRESS)
    add_output(parser, "table", "json", "yaml", "name")
    parser.set_defaults(func=guarded("hash", run))


def run(args: argparse.Namespace) -> int:
    paths = [*args.filename, *args.file]
    if not paths:
        raise UsageError("no input: give -f FILE (a file, a directory, or '-' for stdin)")
    documents = read_documents(paths)
    sources = [(where, doc) for where, doc in documents if doc.get("kind") in SOURCE_KINDS]
    if not sources:
        kinds = sorted({str(doc.get("kind")) for _, doc in documents})
        found = f" (found {', '.join(kinds)})" if kinds else ""
        raise UsageError(f"{', '.join(paths)}: no ConfigMap or Secret{found}")
    hashed = [_entry(where, doc) for where, doc in sources]
    if args.output == "name":
        print("\n".join(object_name(e["kind"], e["name"]) for e in hashed))
    else:
        emit({"resources": hashed}, args.output, _lines)
    return OK


def _entry(where: str, source: Obj) -> Obj:
    meta = metadata(source)
    name = str(meta.get("name") or "")
    try:
        digest = resource_hash(source)
    except CRSError as exc:
        # The controller's own words (a Secret's content is never in them).
        raise UsageError(f"{where}: {exc} ({exc.reason})") from exc
    return {
        "kind": source["kind"],
        "namespace": str(meta.get("namespace") or ""),
        "name": name,
        "hash": digest,
    }


def _lines(data: Obj) -> str:
    entries = data["resources"]
    if len(entries) == 1:
        return f"{entries[0]['hash']}\n"
    return "".join(
        printable(f"{e['hash']}  {e['kind']}/{e['namespace'] or '-'}/{e['name']}") + "\n"
        for e in entries
    )
