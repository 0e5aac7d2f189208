"""crs-controller: run the controller (run), or look at what it does from a terminal
(render, diff, status, convert, hash), or try it on a local control plane (demo).
Exit codes: 0 success, 1 a finding (diff has changes), 2 an error (one line on
stderr)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from crs_controller.app import logs
from crs_controller.app.commands import convert, diff, render, status
from crs_controller.app.commands.common import ERROR
from crs_controller.core.durations import parse_duration
from crs_controller.core.errors import CRSError
from crs_controller.core.hashing import resource_hash
from crs_controller.engine.context import Settings

# The commands for people at a terminal (app/commands), each registering itself.
COMMANDS = [render, diff, status, convert]


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if hasattr(args, "func"):
        code: int = args.func(args)
        return code
    if args.command == "hash":
        return _hash(args.file)
    if args.command == "demo":
        from crs_controller.app.demo import demo  # noqa: PLC0415 - needs the test bed

        return demo(workloads=args.workloads)
    return _run(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crs-controller", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        help="run the controller",
        epilog="examples:\n  crs-controller run --kubeconfig mgmt.kubeconfig --namespace fleet\n"
        "  crs-controller run --leader-elect --extension-cert-dir /certs",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--kubeconfig",
        help="management cluster kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)",
    )
    run.add_argument("--namespace", default="", help="watch one namespace (default: all)")
    run.add_argument(
        "--concurrency",
        type=int,
        default=8,
        help="parallel reconciles; while several namespaces have objects, one namespace "
        "holds at most all but a quarter of them (at least one kept for the others)",
    )
    run.add_argument("--field-manager", default="crs-controller", help="server-side apply manager")
    run.add_argument("--workload-timeout", type=float, default=15.0, help="seconds per request")
    run.add_argument(
        "--allow-proxy-url",
        action="store_true",
        help="honour proxy-url in workload kubeconfigs (refused by default: a tenant could "
        "route the controller's requests through a host of its choosing)",
    )
    run.add_argument("--metrics-addr", default=":8080", help="Prometheus /metrics (0: off)")
    run.add_argument("--health-addr", default=":8081", help="/healthz and /readyz (0: off)")
    run.add_argument("--leader-elect", action="store_true", help="hold a Lease before acting")
    run.add_argument(
        "--leader-election-namespace",
        default=None,
        help="where the leader and shard Leases live (default: $POD_NAMESPACE, else default)",
    )
    run.add_argument(
        "--shard",
        action="store_true",
        help="run as one of several replicas, each reconciling its share of the Clusters "
        "(identity: $POD_NAME, else the host name and a random suffix, new on every start)",
    )
    run.add_argument(
        "--lease-duration",
        type=_lease_duration,
        default=15.0,
        help="how long a Lease holds without renewal, e.g. 15s (renewed every third of it)",
    )
    run.add_argument(
        "--extension-addr", default=":9443", help="Runtime Extension (BeforeClusterDelete) HTTPS"
    )
    run.add_argument(
        "--extension-cert-dir",
        default="",
        help="directory with tls.crt and tls.key; the extension is off without it",
    )
    run.add_argument("--log-format", choices=["json", "console"], default="json")
    run.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info")

    hash_ = sub.add_parser(
        "hash",
        help="print the hash of a ConfigMap/Secret manifest",
        epilog="examples:\n  crs-controller hash calico-configmap.yaml\n"
        "  kubectl get cm calico -o yaml | crs-controller hash -",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    hash_.add_argument(
        "file", help="YAML or JSON file holding one ConfigMap or Secret ('-': stdin)"
    )

    demo = sub.add_parser("demo", help="run the controller against a local control plane")
    demo.add_argument("--workloads", type=int, default=3, help="workload clusters to start")
    for command in COMMANDS:
        command.register(sub)
    return parser


def _hash(path: str) -> int:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        source = yaml.safe_load(text)
        if not isinstance(source, dict):
            raise CRSError(f"{path}: expected one ConfigMap or Secret object")
        print(resource_hash(source))
    except OSError as exc:
        print(f"crs-controller hash: {path}: {exc.strerror}", file=sys.stderr)
        return ERROR
    except UnicodeDecodeError:
        print(f"crs-controller hash: {path}: not a UTF-8 text file", file=sys.stderr)
        return ERROR
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        print(f"crs-controller hash: {path}: not valid YAML{where}", file=sys.stderr)
        return ERROR
    except CRSError as exc:
        print(f"crs-controller hash: {exc} ({exc.reason})", file=sys.stderr)
        return ERROR
    return 0


def _lease_duration(text: str) -> float:
    try:
        seconds = parse_duration(text)
    except CRSError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds < 3:
        raise argparse.ArgumentTypeError("a lease must last at least 3s")
    return seconds


def _run(args: argparse.Namespace) -> int:
    from crs_controller.app.runner import RunOptions, run  # noqa: PLC0415 - keeps `hash` light

    logs.configure(args.log_format, args.log_level)
    settings = Settings(
        namespace=args.namespace or None,
        concurrency=max(1, args.concurrency),
        field_manager=args.field_manager,
        workload_timeout=args.workload_timeout,
        allow_proxy_url=args.allow_proxy_url,
    )
    options = RunOptions(
        kubeconfig=args.kubeconfig,
        settings=settings,
        metrics_addr=args.metrics_addr,
        health_addr=args.health_addr,
        leader_elect=args.leader_elect,
        leader_namespace=args.leader_election_namespace,
        shard=args.shard,
        lease_seconds=args.lease_duration,
        extension_addr=args.extension_addr,
        extension_cert_dir=args.extension_cert_dir,
    )
    try:
        asyncio.run(run(options))
    except KeyboardInterrupt:
        return 130
    except CRSError as exc:
        print(f"crs-controller run: {exc}", file=sys.stderr)
        return ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
