"""crs-controller: run the controller (run), or look at what it does from a terminal
(render, diff, status, convert, hash), let a rollout go on past a step that waits
for an approval (approve), or try it on a local control plane (demo).
Exit codes: 0 success, 1 a finding (diff has changes), 2 an error (one line on
stderr)."""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Collection, Sequence
from importlib import metadata
from pathlib import Path
from typing import NoReturn

from crs_controller.app import logs
from crs_controller.app.commands.common import (
    Subcommands,
    command_parser,
    duration,
)
from crs_controller.clients.workload import WARM_CLIENTS
from crs_controller.core.notifications.delivery import Receiver, in_clear, receiver_url
from crs_controller.core.notifications.payloads import FORMATS
from crs_controller.engine.io.webhooks import postable
from crs_controller.engine.reconcile.context import Settings

# The commands for people at a terminal: each is the module of app/commands that
# registers it, imported only when the command line may need it (``run`` needs none).
COMMANDS = (
    "render",
    "diff",
    "status",
    "dashboard",
    "history",
    "approve",
    "rollback",
    "convert",
    "hash",
    "uninstall",
)

RUN_DESCRIPTION = """\
Run the controller: watch ClusterResourceSets, Clusters and their ConfigMaps and
Secrets in the management cluster, and server-side apply each CRS's objects to
every workload cluster it selects. Logs go to stderr (JSON by default); /metrics,
/healthz and /readyz are served on their own ports."""

DEMO_DESCRIPTION = """\
Start a local control plane (etcd, a management kube-apiserver and N workload
ones; needs KUBEBUILDER_ASSETS or the binaries it names), install the CRDs and the
samples, run the controller against it and show an edit reaching every matching
cluster, and not the others. With --keep it then leaves everything running, prints
the kubeconfigs and commands to try, and stops on Ctrl-C."""


def version() -> str:
    """The installed package's version (what pip shows)."""
    try:
        return metadata.version("crs_controller")
    except metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, commands = _parser(_needed(argv))
    _log_argument_errors(commands["run"], argv)
    own = _own_words(parser)
    for each in (parser, *commands.values()):
        _redact_argument_errors(each, argv, own)
    args, extra = parser.parse_known_args(argv)
    if extra:
        # The subcommand's own usage, not the top level's: that is where the
        # unknown flag was given. Its flags only: a value may be a secret.
        shown = " ".join(_flag_only(arg) for arg in extra)
        commands[args.command].error(f"unrecognized arguments: {shown}")
    if hasattr(args, "func"):
        code: int = args.func(args)
        return code
    if args.command == "completion":
        print(completion_script(parser, args.shell), end="")
        return 0
    if args.command == "demo":
        from crs_controller.app.demo import demo  # noqa: PLC0415 - needs the test bed

        return demo(workloads=args.workloads, keep=args.keep)
    return _run(args, _receivers(commands["run"], args))


def _log_argument_errors(run: argparse.ArgumentParser, argv: list[str]) -> None:
    """An argument ``run`` cannot take ends it as every other way out of ``run`` does:
    one ``run failed`` log line (JSON unless ``--log-format console`` was given) and
    exit 2, so a Deployment's log pipeline reads it like any other line."""
    fmt = "console" if _given(argv, "--log-format") == "console" else "json"

    def error(message: str) -> NoReturn:
        failed = logs.line(fmt, "error", "run failed", error=f"{run.prog}: {message}")
        print(failed, file=sys.stderr)
        sys.exit(2)

    run.error = error  # type: ignore[method-assign]


def _redact_argument_errors(
    parser: argparse.ArgumentParser, argv: list[str], own: Collection[str]
) -> None:
    """An argument error never repeats a value given (a receiver's URL is a secret,
    and a typo in its flag's name makes it a value argparse would quote)."""
    shown = parser.error

    def error(message: str) -> NoReturn:
        shown(_redacted(message, argv, own))

    parser.error = error  # type: ignore[method-assign]


# A string as repr() quotes it, not part of a word (an apostrophe in "can't" opens none).
_QUOTED = re.compile(r"""(?<!\w)(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")


def _redacted(message: str, argv: list[str], own: Collection[str]) -> str:
    """``message`` with every quoted string that is not one of the parser's ``own``
    (``_own_words``) shown as '…', and the value of a ``--flag=value`` of ``argv`` as
    '…' where argparse shows the argument unquoted (an ambiguous option). Argparse
    quotes what it repeats of a value: all of it, or a part (what follows a short
    flag glued to it, ``-hVALUE``), so no part of a value is left."""
    for arg in argv:
        flag, equals, value = arg.partition("=")
        if arg.startswith("-") and equals and value:
            message = message.replace(arg, f"{flag}=…")
    return _QUOTED.sub(lambda quoted: quoted[0] if quoted[0] in own else "'…'", message)


def _own_words(parser: argparse.ArgumentParser) -> frozenset[str]:
    """Every flag and choice of ``parser`` and its commands, quoted as argparse
    quotes them (``invalid choice: '…' (choose from 'run', 'demo', ...)``)."""
    words: set[str] = set()
    for action in parser._actions:
        words.update(repr(word) for word in (*action.option_strings, *(action.choices or ())))
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                words |= _own_words(command)
    return frozenset(words)


def _flag_only(arg: str) -> str:
    """``arg`` as an error may show it: a flag without its value, a value as '…'. A
    short flag's value may be glued to it (``-uVALUE``), and a long flag's (a missing
    '='): what follows the flag's name, as far as a name goes, is a value."""
    if not arg.startswith("-"):
        return "…"
    flag, equals, _ = arg.partition("=")
    name = flag[:2]
    if name == "--":
        name += _NOT_IN_A_NAME.split(flag[2:], maxsplit=1)[0]
    return name + ("…" if name != flag else "") + ("=…" if equals else "")


_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9-]")


def _given(argv: list[str], flag: str) -> str | None:
    """The last value given to ``flag`` (``--flag V`` or ``--flag=V``), if any."""
    found = None
    for at, arg in enumerate(argv):
        if arg == flag and at + 1 < len(argv):
            found = argv[at + 1]
        elif arg.startswith(f"{flag}="):
            found = arg.partition("=")[2]
    return found


class _Help(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written, wider option columns."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=34)


def _needed(argv: list[str]) -> Collection[str]:
    """The commands of ``COMMANDS`` parsing ``argv`` may reach. The top level takes no
    option with a value, so a first word that is not an option is the command, and
    argparse reads no other command's parser: ``run`` and ``demo`` need none, another
    command only its own. Anything else (no command, an option first such as
    ``--help``, an unknown command, ``completion``) needs them all."""
    first = argv[0] if argv else ""
    if first in ("run", "demo"):
        return ()
    return (first,) if first in COMMANDS else COMMANDS


def _parser(
    needed: Collection[str] = COMMANDS,
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The command line; of ``COMMANDS``, only those ``needed`` are imported and
    registered (the others keep their place, unregistered)."""
    parser = argparse.ArgumentParser(
        prog="crs-controller", description=__doc__, formatter_class=_Help
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run(sub)
    _add_demo(sub)
    for name in COMMANDS:
        if name in needed:
            importlib.import_module(f"crs_controller.app.commands.{name}").register(sub)
    _add_completion(sub)
    return parser, dict(sub.choices)


def _add_demo(sub: Subcommands) -> None:
    demo = command_parser(
        sub,
        "demo",
        DEMO_DESCRIPTION,
        help="run the controller against a local control plane",
        epilog="examples:\n  crs-controller demo --workloads 2\n  crs-controller demo --keep",
        formatter_class=_Help,
    )
    demo.add_argument(
        "--workloads",
        metavar="N",
        type=int,
        default=3,
        help="workload clusters to start (default: %(default)s)",
    )
    demo.add_argument(
        "--keep",
        action="store_true",
        help="leave the control plane and the controller running until Ctrl-C (a sandbox)",
    )


def _add_run(sub: Subcommands) -> None:
    run = command_parser(
        sub,
        "run",
        RUN_DESCRIPTION,
        help="run the controller",
        epilog="examples:\n  crs-controller run --kubeconfig mgmt.kubeconfig --namespace fleet\n"
        "  crs-controller run --leader-elect --extension-cert-dir /certs",
        formatter_class=_Help,
    )
    # In this order: --help lists them so.
    _run_cluster_options(run)
    _run_workload_options(run)
    _run_observability_options(run)
    _run_leader_options(run)
    _run_extension_options(run)
    _run_notify_options(run)


def _run_cluster_options(run: argparse.ArgumentParser) -> None:
    """The management cluster, what is watched there, and how it is reconciled."""
    run.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="management cluster kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)",
    )
    run.add_argument(
        "--namespace", metavar="NS", default="", help="watch one namespace (default: all)"
    )
    run.add_argument(
        "--concurrency",
        metavar="N",
        type=int,
        default=8,
        help="parallel reconciles; while several namespaces have objects, one namespace "
        "holds at most all but a quarter of them (at least one kept for the others) "
        "(default: %(default)s)",
    )
    run.add_argument(
        "--field-manager",
        metavar="NAME",
        default="crs-controller",
        help="server-side apply manager (default: %(default)s)",
    )


def _run_workload_options(run: argparse.ArgumentParser) -> None:
    """The requests to workload clusters, and how many clusters update at once."""
    run.add_argument(
        "--workload-timeout",
        metavar="SECONDS",
        type=float,
        default=15.0,
        help="seconds per workload request, connect to last byte (default: %(default)s)",
    )
    run.add_argument(
        "--allow-proxy-url",
        action="store_true",
        help="honour proxy-url in workload kubeconfigs (refused by default: a tenant could "
        "route the controller's requests through a host of its choosing)",
    )
    run.add_argument(
        "--workload-idle-connections",
        metavar="N",
        type=_positive,
        default=WARM_CLIENTS,
        help="at most N workload clusters keep their idle connection and TLS context; "
        "the others connect again when next reconciled (default: %(default)s)",
    )
    run.add_argument(
        "--max-updating-clusters",
        type=_positive,
        default=None,
        metavar="N",
        help="at most N clusters take a new revision at once, across every ClusterResourceSet "
        "(first installs are not counted); in a shard set each member enforces N / members "
        "(default: no limit)",
    )


def _run_observability_options(run: argparse.ArgumentParser) -> None:
    """Logs, metrics and health checks."""
    run.add_argument(
        "--log-format",
        choices=["json", "console"],
        default="json",
        help="log lines as JSON or for a person (default: %(default)s)",
    )
    run.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default="info",
        help="the lowest level logged (default: %(default)s)",
    )
    run.add_argument(
        "--metrics-addr",
        metavar="ADDR",
        default="127.0.0.1:8080",
        help="Prometheus /metrics, 0: off; the Deployment binds :8080 (default: %(default)s)",
    )
    run.add_argument(
        "--health-addr",
        metavar="ADDR",
        default="127.0.0.1:8081",
        help="/healthz and /readyz, 0: off; the Deployment binds :8081 (default: %(default)s)",
    )


def _run_leader_options(run: argparse.ArgumentParser) -> None:
    """The leader Lease and sharding among replicas."""
    run.add_argument("--leader-elect", action="store_true", help="hold a Lease before acting")
    run.add_argument(
        "--leader-election-namespace",
        metavar="NS",
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
        metavar="DURATION",
        type=_lease_duration,
        default=15.0,
        help="how long a Lease holds without renewal, renewed every third of it (default: 15s)",
    )


def _run_extension_options(run: argparse.ArgumentParser) -> None:
    """The Runtime Extension's HTTPS server."""
    run.add_argument(
        "--extension-addr",
        metavar="ADDR",
        default=":9443",
        help="Runtime Extension HTTPS: BeforeClusterDelete, BeforeClusterUpgrade, "
        "AfterControlPlaneUpgrade, BeforeWorkersUpgrade (default: %(default)s)",
    )
    run.add_argument(
        "--extension-hooks",
        metavar="HOOKS",
        type=_hooks,
        default=None,
        help="comma-separated hooks to serve (default: all four); before Cluster API "
        "v1.12 leave out BeforeWorkersUpgrade, which its discovery refuses",
    )
    run.add_argument(
        "--extension-cert-dir",
        metavar="DIR",
        default="",
        help="directory with tls.crt and tls.key; the extension is off without it",
    )


def _run_notify_options(run: argparse.ArgumentParser) -> None:
    """Notifications to the operator's receivers (docs/operations.md#notifications)."""
    run.add_argument(
        "--notify-url",
        metavar="URL",
        action="append",
        type=_notify_url,
        default=[],
        help="POST a notification here when a rollout halts, waits for approval or "
        "completes, a validation fails or a deletion is refused (repeatable; http or https); "
        "shown in the process's command line: prefer --notify-url-file",
    )
    run.add_argument(
        "--notify-url-file",
        metavar="FILE",
        action="append",
        type=_url_file,
        default=[],
        help="the receivers' URLs, one a line ('#' opens a comment line), e.g. mounted "
        "from a Secret (repeatable)",
    )
    run.add_argument(
        "--notify-format",
        choices=FORMATS,
        default="cloudevents",
        help="the body: a CloudEvent (structured JSON) or a Slack incoming webhook's "
        "message (default: %(default)s)",
    )
    run.add_argument(
        "--notify-token-file",
        metavar="FILE",
        type=_token_file,
        default=None,
        help="send the token this file holds as 'Authorization: Bearer' to every receiver",
    )


def _notify_url(text: str) -> str:
    try:
        url = receiver_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if not postable(url):  # the host as the HTTP client encodes it
        raise argparse.ArgumentTypeError("the host is not a valid host name")
    return url


def _url_file(path: str) -> tuple[str, ...]:
    """The receivers' URLs the file holds (read once, at start): one a line, blank
    lines and lines starting with '#' left out. An error names the file and the line,
    never what the line holds."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"{path}: cannot be read ({type(exc).__name__})") from exc
    urls = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            urls.append(_notify_url(text))
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{path}:{number}: {exc}") from None
    if not urls:
        raise argparse.ArgumentTypeError(f"{path}: holds no URL")
    return tuple(urls)


def _token_file(path: str) -> str:
    """The token the file holds (read once, at start), without surrounding space: one
    line of visible ASCII characters, as an HTTP header's value must be."""
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"{path}: cannot be read ({type(exc).__name__})") from exc
    if not token or any(not "!" <= c <= "~" for c in token):
        raise argparse.ArgumentTypeError(
            f"{path}: must hold one token, on one line, of visible ASCII characters"
        )
    return token


def _hooks(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    known = (
        "BeforeClusterDelete",
        "BeforeClusterUpgrade",
        "AfterControlPlaneUpgrade",
        "BeforeWorkersUpgrade",
    )
    if not names or any(n not in known for n in names):
        raise argparse.ArgumentTypeError(f"hooks are some of {', '.join(known)}")
    return names


def _positive(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError("must be a whole number of at least 1")
    return int(text)


def _lease_duration(text: str) -> float:
    seconds = duration(text)
    if seconds < 3:
        raise argparse.ArgumentTypeError("a lease must last at least 3s")
    return seconds


def _receivers(run: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[Receiver, ...]:
    """The receivers of ``--notify-url`` and ``--notify-url-file``. A token is never
    sent in clear text: with one, an http URL to a host other than loopback ends
    ``run`` (exit 2, as any argument error)."""
    urls = [*args.notify_url, *(url for urls in args.notify_url_file for url in urls)]
    token = args.notify_token_file
    if token is not None and any(in_clear(url) for url in urls):
        run.error(
            "argument --notify-token-file: the token would cross the network in clear "
            "text to an http receiver: use https (http only to a loopback host)"
        )
    return tuple(Receiver(url, args.notify_format, token) for url in urls)


def _run(args: argparse.Namespace, told: tuple[Receiver, ...]) -> int:
    from crs_controller.app.runner import RunOptions, main  # noqa: PLC0415 - keeps `hash` light

    logs.configure(args.log_format, args.log_level)
    settings = Settings(
        namespace=args.namespace or None,
        concurrency=max(1, args.concurrency),
        field_manager=args.field_manager,
        workload_timeout=args.workload_timeout,
        allow_proxy_url=args.allow_proxy_url,
        workload_idle_connections=args.workload_idle_connections,
        max_updating_clusters=args.max_updating_clusters,
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
        extension_hooks=args.extension_hooks,
        receivers=told,
    )
    # Every line it writes is a log line, its failure too (JSON with --log-format json).
    return main(options)


# --- Shell completion, from the parser itself: a new option completes on its own. ---

COMPLETION_EPILOG = """\
examples:
  # this shell only
  source <(crs-controller completion bash)
  # every new shell
  crs-controller completion bash > /etc/bash_completion.d/crs-controller
  # zsh: in ~/.zshrc
  source <(crs-controller completion zsh)
"""


def _add_completion(sub: Subcommands) -> None:
    parser = command_parser(
        sub,
        "completion",
        "Print a script that completes crs-controller's commands, options and "
        "their values (files where an option takes a path) in bash or zsh.",
        help="print a shell completion script (bash or zsh)",
        epilog=COMPLETION_EPILOG,
        formatter_class=_Help,
    )
    parser.add_argument("shell", choices=["bash", "zsh"], help="the shell to complete in")


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """A bash function (zsh runs it through bashcompinit): subcommands first, then
    each subcommand's options, the choices of an option that has them, and the
    shell's own file completion for any other value."""
    bash = _BASH.format(
        top=" ".join([*_subparsers(parser), *_flags(parser)]),
        values="".join(_value_cases(parser)),
        flags="".join(
            f"                {name}) words={_quote(' '.join(_flags(p)))} ;;\n"
            for name, p in _subparsers(parser).items()
        ),
        positional="".join(_positional_cases(parser)),
    )
    return bash if shell == "bash" else _ZSH_HEAD + bash


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public accessor for subcommands
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [option for action in parser._actions for option in action.option_strings]


def _value_cases(parser: argparse.ArgumentParser) -> list[str]:
    """One case per (subcommand, option taking a value): its choices, or nothing so
    that the shell completes a file name."""
    cases = []
    for name, sub in _subparsers(parser).items():
        for action in sub._actions:
            if not action.option_strings or action.nargs == 0:
                continue
            words = " ".join(str(c) for c in action.choices or ())
            for option in action.option_strings:
                cases.append(f"        {name}:{option}) words={_quote(words)} ;;\n")
    return cases


def _positional_cases(parser: argparse.ArgumentParser) -> list[str]:
    cases = []
    for name, sub in _subparsers(parser).items():
        for action in sub._actions:
            if not action.option_strings and action.choices:
                words = " ".join(str(c) for c in action.choices)
                cases.append(f"                {name}) words={_quote(words)} ;;\n")
    return cases


def _quote(words: str) -> str:
    return "'" + words.replace("'", "") + "'"


_BASH = """\
# bash completion for crs-controller: source <(crs-controller completion bash)
_crs_controller() {{
    local cur prev cmd words i
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    cmd=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            -*) ;;
            *) cmd="${{COMP_WORDS[i]}}"; break ;;
        esac
    done
    if [[ -z "$cmd" ]]; then
        COMPREPLY=($(compgen -W '{top}' -- "$cur"))
        return
    fi
    words="__none__"
    case "$cmd:$prev" in
{values}    esac
    if [[ "$words" == "__none__" ]]; then
        if [[ "$cur" == -* ]]; then
            case "$cmd" in
{flags}            esac
        else
            words=""
            case "$cmd" in
{positional}            esac
        fi
    fi
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _crs_controller crs-controller
"""

_ZSH_HEAD = """\
# zsh completion for crs-controller, through zsh's support for bash completions:
# source <(crs-controller completion zsh), e.g. in ~/.zshrc
(( $+functions[compdef] )) || {{ autoload -U compinit && compinit; }}
autoload -U +X bashcompinit && bashcompinit
""".replace("{{", "{").replace("}}", "}")


if __name__ == "__main__":
    sys.exit(main())
