"""What every command shares: its parser and the options several take (``-f``,
``-o``, ``-n``, ``--kubeconfig``/``--context``), reading manifests from files,
directories or stdin, printing tables or ``-o json|yaml``, the management cluster,
and one error line with exit code 2 instead of a traceback."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import yaml

from crs_controller.clients.api import KubeAPI
from crs_controller.clients.kube import MANAGEMENT_LIMITS, KubeClient
from crs_controller.clients.kubeconfig import management_access
from crs_controller.core.api.models import API_VERSION, CLUSTER_RESOURCE_SET_KIND
from crs_controller.core.durations import parse_duration
from crs_controller.core.errors import Conflict, CRSError, InvalidManifest, NotFound
from crs_controller.core.manifests.documents import load_documents
from crs_controller.core.manifests.scalars import STR, resolve_plain
from crs_controller.core.rollout.snapshots import read, snapshot_name
from crs_controller.core.spec.objects import CRS, parse_crs
from crs_controller.core.text import safe

OK, FINDING, ERROR = 0, 1, 2
INTERRUPTED = 130  # as a shell reports Ctrl-C
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")

Obj = dict[str, Any]


class UsageError(CRSError):
    """The command line or its input cannot be used as given."""

    reason = "UsageError"


# What the top-level parser's add_subparsers returns, for each command to add itself.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def command_parser(
    sub: Subcommands,
    name: str,
    doc: str | None,
    *,
    help: str,  # as add_parser calls it
    epilog: str,
    formatter_class: type[argparse.HelpFormatter] = argparse.RawDescriptionHelpFormatter,
) -> argparse.ArgumentParser:
    """The parser of the subcommand ``name``: ``help`` is its line in the top-level
    help; ``doc`` (a module docstring, its reST double backquotes dropped) and
    ``epilog`` (examples, exit status) are printed by ``--help`` as written."""
    return sub.add_parser(
        name,
        help=help,
        description=(doc or "").replace("``", ""),
        epilog=epilog,
        formatter_class=formatter_class,
    )


# Without -n, as kubectl: the namespace of the kubeconfig context used, else this one.
DEFAULT_NAMESPACE = "default"


def add_namespace(parser: argparse.ArgumentParser) -> None:
    """``-n/--namespace``, as kubectl takes it: one namespace; when not given (None
    here), the one management() settles: the kubeconfig context's, else ``default``."""
    parser.add_argument(
        "-n",
        "--namespace",
        help="namespace (default: the kubeconfig context's namespace, else default)",
    )


def duration(text: str) -> float:
    """An option's duration (30s, 5m, 1h30m), read as the controller reads durations;
    argparse's own error (exit code 2) when it is not one."""
    try:
        return parse_duration(text)
    except CRSError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_files(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``-f/--filename`` as kubectl takes it: repeatable; a file, a directory, or '-'."""
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=required,
        default=None if required else [],
        metavar="FILE",
        help="a manifest file, a directory of them, or '-' for stdin (repeatable)",
    )


def add_output(parser: argparse.ArgumentParser, *choices: str) -> None:
    """``-o/--output``: one of ``choices``, the first by default (table, json, yaml
    when none are given)."""
    parser.add_argument(
        "-o",
        "--output",
        choices=choices or ("table", "json", "yaml"),
        default=(choices or ("table",))[0],
        help="output format (default: %(default)s)",
    )


def add_cluster_access(parser: argparse.ArgumentParser) -> None:
    """``--kubeconfig`` and ``--context``: the management cluster, read by management()."""
    parser.add_argument(
        "--kubeconfig", help="management cluster kubeconfig (default: $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")


def management(args: argparse.Namespace) -> KubeClient:
    """The management cluster's client, from ``--kubeconfig`` and ``--context``. A
    command given no ``-n`` works in that context's namespace, else ``default``, as
    kubectl does: ``args.namespace`` is settled here, before any request is made."""
    access = management_access(args.kubeconfig, args.context)
    if "namespace" in vars(args) and args.namespace is None:
        args.namespace = access.namespace or DEFAULT_NAMESPACE
    return KubeClient(access.endpoint, name="management cluster", limits=MANAGEMENT_LIMITS)


async def get_object(
    client: KubeAPI, api_version: str, kind: str, name: str, namespace: str | None
) -> Obj | None:
    """One object as the API server has it now, None when there is no such object.
    A kind the server does not serve (its CRD not installed, or a kubeconfig or
    context naming another cluster) is not a missing object: it raises discovery's
    NotFound, worded as a LIST of that kind words it ("… is not served: is its CRD
    installed?"), which ``guarded`` prints with exit code 2."""
    await client.resource_info(api_version, kind)
    return await client.get(api_version, kind, name, namespace)


async def get_crs(client: KubeClient, namespace: str, name: str) -> CRS:
    """The CRS as the API server has it now; UsageError (exit 2) when there is none,
    NotFound (exit 2) when the server serves no ClusterResourceSets."""
    raw = await get_object(client, API_VERSION, CLUSTER_RESOURCE_SET_KIND, name, namespace)
    if raw is None:
        raise UsageError(f"ClusterResourceSet {namespace}/{name} not found")
    return parse_crs(raw)


async def annotate(client: KubeClient, crs: CRS, key: str, value: str, where: str) -> None:
    """Set one annotation of ``crs`` with a JSON merge patch carrying the
    resourceVersion read: a CRS that changed in between (a new revision, another
    step) is not written, and the user is told to run again (exit 2)."""
    patch = {
        "metadata": {"resourceVersion": crs.meta.resource_version, "annotations": {key: value}}
    }
    try:
        await client.merge_patch(
            API_VERSION, CLUSTER_RESOURCE_SET_KIND, crs.name, crs.namespace, patch
        )
    except Conflict as exc:
        raise UsageError(f"{where} changed meanwhile, run again") from exc
    except NotFound as exc:
        raise UsageError(f"{where} not found") from exc


async def read_snapshot(client: KubeAPI, crs: CRS, rev: str) -> dict[tuple[str, str], Obj]:
    """The raw sources of revision ``rev`` of ``crs`` from its snapshot (ConfigMap, and
    Secret when the CRS names Secrets), read and checked as the controller reads and
    checks it before using it (``core.rollout.snapshots.read``): the same objects, the
    same checks, so what it refuses the controller refuses. Raises SnapshotRefused,
    whose message names fields and objects, never content."""
    keys = [(ref.kind, ref.name) for ref in crs.valid.spec.resources]
    name = snapshot_name(crs.name, rev)
    configmap = await client.get("v1", "ConfigMap", name, crs.namespace)
    secret = None
    if any(kind == "Secret" for kind, _ in keys):
        secret = await client.get("v1", "Secret", name, crs.namespace)
    return read(configmap, secret, str(crs.meta.uid), rev, keys)


def emit(data: Any, output: str, table: Callable[[Any], str]) -> None:
    if output == "json":
        print(json.dumps(data, indent=2, sort_keys=False))
    elif output == "yaml":
        print(yaml.safe_dump(data, sort_keys=False), end="")
    else:
        print(table(data), end="")


# A revision in a table: the 'xxh3:' prefix and 12 hex digits, like a short Git hash.
SHORT_REVISION = 17
# Long enough for any message the CLI prints; a table cell is never cut.
PRINT_LIMIT = 100_000


def printable(text: str) -> str:
    """``text`` with control characters escaped as the status, bindings and logs show
    them: names and messages come from objects a tenant may write, and must not drive
    the terminal (escape sequences)."""
    return safe(text, PRINT_LIMIT)


def say(command: str, message: str) -> None:
    """One line on stderr, prefixed with the command (``crs-controller render: …``) and
    escaped: errors, warnings and notes alike; the exit code is the caller's."""
    print(printable(f"crs-controller {command}: {message}"), file=sys.stderr)


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns as kubectl prints them: left-aligned, three spaces apart."""
    rows = [[printable(str(cell)) for cell in row] for row in rows]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "   ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    ]
    return "\n".join(lines) + "\n"


def guarded(
    command: str, run: Callable[[argparse.Namespace], int]
) -> Callable[[argparse.Namespace], int]:
    """Errors become one line on stderr and exit code 2, Ctrl-C exit code 130, never a
    traceback."""

    def call(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except CRSError as exc:
            say(command, str(exc))
            return ERROR
        except OSError as exc:
            say(command, f"{exc.filename or ''}: {exc.strerror}")
            return ERROR
        except KeyboardInterrupt:
            return INTERRUPTED

    return call


def read_documents(paths: Sequence[str]) -> list[tuple[str, Obj]]:
    """Every object in ``paths`` (files, directories of manifests, '-' for stdin), as
    (where, object): where names the file and document for error messages."""
    found = []
    for where, text in _texts(paths):
        for index, doc in enumerate(_load_all(where, text)):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise UsageError(f"{where} document {index + 1}: not an object")
            if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
                found += [
                    (f"{where} document {index + 1}", i)
                    for i in doc["items"]
                    if isinstance(i, dict)
                ]
            else:
                found.append((f"{where} document {index + 1}", doc))
    return found


def metadata(doc: Obj) -> Obj:
    """A read document's metadata; {} when it is missing or not a mapping."""
    meta = doc.get("metadata")
    return meta if isinstance(meta, dict) else {}


def named(obj: Obj) -> Obj:
    """What a command keeps of a listed object to name it, and to know whether it is
    being deleted: never its content."""
    meta = metadata(obj)
    kept = ("namespace", "name", "deletionTimestamp")
    return {"metadata": {key: meta[key] for key in kept if key in meta}}


async def listed(client: KubeAPI, api_version: str, kind: str, namespace: str | None) -> list[Obj]:
    """Each object of a LIST as ``named`` keeps it, read page by page: each page is
    bounded on its own and only names stay, so other tenants' large objects (a
    last-applied annotation, say) never add up to a refusal of a LIST of every
    namespace."""
    found: list[Obj] = []
    async for page, _ in client.pages(api_version, kind, namespace):
        found += [named(obj) for obj in page]
    return found


def _texts(paths: Sequence[str]) -> Iterator[tuple[str, str]]:
    for path in paths:
        if path == "-":
            yield "stdin", sys.stdin.read()
            continue
        target = Path(path)
        files = (
            sorted(p for p in target.iterdir() if p.suffix in MANIFEST_SUFFIXES)
            if target.is_dir()
            else [target]
        )
        for file in files:
            try:
                yield str(file), file.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise UsageError(f"{file}: not a UTF-8 text file") from exc


def _load_all(where: str, text: str) -> list[Any]:
    """Parsed within the controller's own limits (an alias bomb in a file is refused
    as it would be in a ConfigMap)."""
    try:
        return load_documents(where, text)
    except InvalidManifest as exc:
        raise UsageError(str(exc)) from exc


# --- Shared by every command's output, as kubectl prints it. ---

# The fully qualified resource of ``-o name`` (kubectl's RESOURCE.GROUP/NAME).
RESOURCE_NAMES = {
    "ClusterResourceSet": "clusterresourceset.addons.crs.dev",
    "ClusterResourceSetBinding": "clusterresourcesetbinding.addons.crs.dev",
    "ConfigMap": "configmap",
    "Secret": "secret",
    "Cluster": "cluster.cluster.x-k8s.io",
}


def object_name(kind: str, name: str, api_version: str = "") -> str:
    """``-o name``'s form: ``clusterresourceset.addons.crs.dev/cni``; a kind not
    listed is lowercased with its API group, as kubectl shows it."""
    resource = RESOURCE_NAMES.get(kind)
    if resource is None:
        group = api_version.rpartition("/")[0]
        resource = f"{kind.lower()}.{group}" if group else kind.lower()
    return printable(f"{resource}/{name}")


def no_resources(namespace: str | None) -> None:
    """kubectl's line for an empty answer, on stderr so a pipe reads nothing."""
    where = f" in {namespace} namespace" if namespace else ""
    print(printable(f"No resources found{where}."), file=sys.stderr)


def warn(command: str, message: str) -> None:
    """A warning: one line on stderr, prefixed as errors are, exit code unchanged."""
    say(command, f"warning: {message}")


# --- manifests out ---------------------------------------------------------------------


class _ManifestDumper(yaml.SafeDumper):
    """Multi-line strings (a manifest inside a ConfigMap) as literal blocks, as
    kubectl and helm print them; PyYAML quotes when a block cannot hold the text
    exactly. A string is quoted when PyYAML or go-yaml v2 (kubectl's and Cluster
    API's reader) would read it plain as anything but a string: ``y`` and ``n`` are
    booleans there, ``1e3`` and ``0o17`` numbers."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        tag: str = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        if kind is yaml.ScalarNode and implicit[0] and tag == STR:
            tag = resolve_plain(value)[0]
        return tag


# YAML 1.1 line breaks that PyYAML writes as they are but reads back as a newline or
# a space: such a string is double-quoted, where they are escaped.
_READ_AS_BREAKS = frozenset("\x85\u2028\u2029")


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    if not _READ_AS_BREAKS.isdisjoint(value):
        style = '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ManifestDumper.add_representer(str, _represent_str)


def dump_manifest(document: Any) -> str:
    """One object as YAML that reads back as the same object, keys in their order,
    through PyYAML as through kubectl and Cluster API."""
    text: str = yaml.dump(document, Dumper=_ManifestDumper, sort_keys=False, allow_unicode=True)
    return text


def dump_manifests(documents: list[dict[str, Any]]) -> str:
    """One ``---`` document per object, keys in their order."""
    text: str = yaml.dump_all(
        documents,
        Dumper=_ManifestDumper,
        sort_keys=False,
        explicit_start=True,
        allow_unicode=True,
    )
    return text
