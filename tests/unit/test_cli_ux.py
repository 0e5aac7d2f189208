"""The command line as a kubectl or clusterctl user expects it: ``--version``; an
unknown flag answered with the subcommand's usage; help texts with a description
and their defaults, for every subcommand; ``-n/--namespace`` the same option in
every command that takes it, the kubeconfig context's namespace without it; shell
completion that completes; ``-o name``'s form; warnings and errors with one prefix;
and ``status``'s table, then only what changed (``-w``), with "No resources found"
on stderr when there is nothing; its STATE (a paused CRS, a refused spec) and why,
in ``-o wide``."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from crs_controller.app.cli import _parser, completion_script, main, version
from crs_controller.app.commands.common import management, object_name
from crs_controller.app.commands.status import _Printer, crs_state, table_rows

SUBCOMMANDS = [
    "run", "demo", "render", "diff", "status", "dashboard", "history", "approve", "rollback",
    "convert", "hash", "uninstall", "completion",
]  # fmt: skip
# What each needs besides the unknown flag, so that the flag is the only problem.
REQUIRED = {
    "render": ["-f", "x.yaml"],
    "diff": ["cni", "--cluster", "c"],
    "approve": ["cni"],
    "history": ["cni"],
    "rollback": ["cni"],
    "convert": ["-f", "x.yaml"],
    "completion": ["bash"],
}


def exits(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    """argparse's own exits (--help, --version, usage errors)."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert exits(capsys, ["--version"]) == (0, f"crs-controller {version()}\n", "")
    assert version() == "0.1.0"  # pyproject.toml's, as installed


# run's argument errors are a log line (test_log_stream.py), as all its ways out are.
@pytest.mark.parametrize("command", [c for c in SUBCOMMANDS if c != "run"])
def test_an_unknown_flag_prints_the_subcommands_usage(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    argv = [command, *REQUIRED.get(command, []), "--bogus"]
    code, out, err = exits(capsys, argv)
    assert (code, out) == (2, "")
    assert err.startswith(f"usage: crs-controller {command} ")
    assert err.endswith(f"crs-controller {command}: error: unrecognized arguments: --bogus\n")


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("run", ["Run the controller:", "(default: 8)", "(default: crs-",
                 "(default: 15.0)", "(default: json)", "(default: info)",
                 "(default: 127.0.0.1:8080)", "(default: 127.0.0.1:8081)", "(default: 15s)",
                 "(default: :9443)", "examples:"]),
        ("demo", ["Start a local control plane", "(default: 3)", "examples:"]),
        ("hash", ["the hash the controller computes", "-f FILE, --filename FILE",
                  "(default: table)", "examples:", "exit status:"]),
        ("status", ["-w, --watch", "--timeout", "(default: table)", "(default: never)"]),
        ("dashboard", ["read-only", "(default: 127.0.0.1:8080", "-A, --all-namespaces"]),
        ("completion", ["bash or zsh", "source <(crs-controller completion bash)"]),
    ],
)  # fmt: skip
def test_help_has_a_description_defaults_and_examples(
    capsys: pytest.CaptureFixture[str], command: str, expected: list[str]
) -> None:
    code, out, _ = exits(capsys, [command, "--help"])
    flat = " ".join(out.split())
    assert code == 0
    for text in expected:
        assert " ".join(text.split()) in flat, text


def test_every_subcommand_is_tested() -> None:
    _, commands = _parser()
    assert list(commands) == SUBCOMMANDS  # also the order the top-level help lists them in


@pytest.mark.parametrize("command", SUBCOMMANDS)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_subcommands_help_works(
    capsys: pytest.CaptureFixture[str], command: str, flag: str
) -> None:
    code, out, err = exits(capsys, [command, flag])
    assert (code, err) == (0, "")
    assert out.startswith(f"usage: crs-controller {command} ")
    description = out.split("\n\n")[1]  # after the usage, as written
    assert description.strip() and not description.startswith("positional arguments")
    assert "``" not in out
    assert "\nexamples:\n" in out


# The commands that take -n/--namespace, with what else each needs to parse.
NAMESPACED = {
    "diff": ["cni", "--cluster", "c"], "status": [], "dashboard": [], "history": ["cni"],
    "approve": ["cni"], "rollback": ["cni"], "uninstall": []
}  # fmt: skip


def test_the_commands_with_n_are_those_listed() -> None:
    _, commands = _parser()
    taking = [name for name, parser in commands.items() if "-n" in parser._option_string_actions]
    assert taking == list(NAMESPACED)


NAMESPACE_HELP = "namespace (default: the kubeconfig context's namespace, else default)"


@pytest.mark.parametrize(("command", "required"), NAMESPACED.items())
@pytest.mark.parametrize(
    ("given", "namespace"),
    [([], None), (["-n", "fleet"], "fleet"), (["--namespace", "fleet"], "fleet"),
     (["--namespace=fleet"], "fleet"), (["-nfleet"], "fleet")],
)  # fmt: skip
def test_n_namespace_means_the_same_in_every_command(
    capsys: pytest.CaptureFixture[str],
    command: str,
    required: list[str],
    given: list[str],
    namespace: str | None,
) -> None:
    parser, commands = _parser()
    # None: not given, settled from the kubeconfig (below) when the command runs.
    assert parser.parse_args([command, *required, *given]).namespace == namespace
    option = commands[command]._option_string_actions["-n"]
    assert (option.option_strings, option.dest, option.default, option.help) == (
        ["-n", "--namespace"],
        "namespace",
        None,
        NAMESPACE_HELP,
    )
    _, out, _ = exits(capsys, [command, "--help"])
    assert "-n NAMESPACE, --namespace NAMESPACE" in out
    assert NAMESPACE_HELP in " ".join(out.split())


def two_contexts(path: Path, current: str) -> str:
    """A kubeconfig whose context ``fleet`` names namespace fleet, ``plain`` none."""
    cluster = {"server": "https://mgmt:6443"}
    contexts = {"fleet": {"namespace": "fleet"}, "plain": {}}
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": name, "context": {"cluster": "c", "user": "u", **extra}}
                    for name, extra in contexts.items()
                ],
                "current-context": current,
            }
        )
    )
    return str(path)


@pytest.mark.parametrize(("command", "required"), NAMESPACED.items())
@pytest.mark.parametrize(
    ("current", "given", "namespace"),
    [("fleet", [], "fleet"),                                # the current context's
     ("plain", [], "default"),                              # it names none
     ("plain", ["--context", "fleet"], "fleet"),            # the --context one's
     ("fleet", ["--context", "plain"], "default"),
     ("fleet", ["-n", "apps"], "apps"),                     # -n wins
     ("plain", ["--context", "fleet", "-n", "apps"], "apps"),
     ("fleet", ["-n", "default"], "default")],
)  # fmt: skip
def test_without_n_the_namespace_is_the_kubeconfig_contexts(
    tmp_path: Path,
    command: str,
    required: list[str],
    current: str,
    given: list[str],
    namespace: str,
) -> None:
    parser, _ = _parser()
    kubeconfig = two_contexts(tmp_path / "kubeconfig", current)
    args = parser.parse_args([command, *required, "--kubeconfig", kubeconfig, *given])
    client = management(args)
    asyncio.run(client.close())
    assert args.namespace == namespace


def test_runs_namespace_is_the_one_watched_all_by_default() -> None:
    """Another option under the same long name: no -n, and no namespace means all."""
    parser, commands = _parser()
    assert "-n" not in commands["run"]._option_string_actions
    assert parser.parse_args(["run"]).namespace == ""
    assert parser.parse_args(["run", "--namespace", "fleet"]).namespace == "fleet"


def complete(script: Path, *words: str) -> list[str]:
    """What bash offers after ``words`` (the last one being typed)."""
    probe = (
        f'source "{script}"\n'
        f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        'COMPREPLY=(); _crs_controller; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
    return [line for line in done.stdout.splitlines() if line]


@pytest.mark.parametrize(
    ("words", "offered"),
    [
        (["crs-controller", "st"], ["status"]),
        (["crs-controller", "--v"], ["--version"]),
        (["crs-controller", "status", "-o", ""], ["table", "wide", "json", "yaml", "name"]),
        (["crs-controller", "status", "--w"], ["--watch"]),
        (["crs-controller", "hash", "-o", "j"], ["json"]),
        (["crs-controller", "run", "--log-level", "w"], ["warning"]),
        (["crs-controller", "completion", ""], ["bash", "zsh"]),
        # A path: nothing offered here, so bash completes a file name (-o default).
        (["crs-controller", "status", "--kubeconfig", ""], []),
        (["crs-controller", "hash", "-f", "x"], []),
    ],
)
@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_completes(tmp_path: Path, words: list[str], offered: list[str]) -> None:
    script = tmp_path / "crs-controller.bash"
    parser, _ = _parser()
    script.write_text(completion_script(parser, "bash"))
    assert complete(script, *words) == offered


def test_completion_prints_a_script_for_each_shell(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "bash"]) == 0
    bash = capsys.readouterr().out
    assert "complete -o default -F _crs_controller crs-controller" in bash
    assert main(["completion", "zsh"]) == 0
    zsh = capsys.readouterr().out
    assert zsh.startswith("# zsh completion for crs-controller")
    assert "bashcompinit" in zsh and zsh.endswith(bash)
    assert exits(capsys, ["completion", "fish"])[0] == 2


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completion_registers_and_completes(tmp_path: Path) -> None:
    parser, _ = _parser()
    script = tmp_path / "crs-controller.zsh"
    script.write_text(completion_script(parser, "zsh"))
    # As zsh's bash support calls the function: in sh emulation (arrays from 0).
    probe = (
        f'source "{script}"\n'
        "print -r -- ${_comps[crs-controller]}\n"
        'emulate sh -c \'COMP_WORDS=(crs-controller status -o ""); COMP_CWORD=3; '
        'COMPREPLY=(); _crs_controller; echo "${COMPREPLY[@]}"\'\n'
    )
    done = subprocess.run(["zsh", "-f", "-c", probe], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    registered, offered = done.stdout.splitlines()
    assert "_crs_controller" in registered
    assert offered == "table wide json yaml name"


@pytest.mark.parametrize(
    ("kind", "api_version", "name", "expected"),
    [
        ("ClusterResourceSet", "addons.crs.dev/v1alpha1", "cni",
         "clusterresourceset.addons.crs.dev/cni"),
        ("ConfigMap", "v1", "calico", "configmap/calico"),
        ("Secret", "v1", "token", "secret/token"),
        ("Cluster", "cluster.x-k8s.io/v1beta2", "prod", "cluster.cluster.x-k8s.io/prod"),
        ("Deployment", "apps/v1", "web", "deployment.apps/web"),
        ("Namespace", "v1", "calico-system", "namespace/calico-system"),
        ("ConfigMap", "v1", "a\x1b[2Jb", "configmap/a\\x1b[2Jb"),
    ],
)  # fmt: skip
def test_o_name_is_kubectls_form(kind: str, api_version: str, name: str, expected: str) -> None:
    assert object_name(kind, name, api_version) == expected


def test_warnings_and_errors_share_one_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capi = {
        "apiVersion": "addons.cluster.x-k8s.io/v1beta2",
        "kind": "ClusterResourceSet",
        "metadata": {"name": "cni", "namespace": "fleet"},
        "spec": {
            "clusterSelector": {},
            "resources": [{"kind": "ConfigMap", "name": "a"}],
            "foo": "bar",
        },
    }
    path = tmp_path / "capi.yaml"
    path.write_text(yaml.safe_dump(capi))
    assert main(["convert", "-f", str(path)]) == 0
    (warning,) = capsys.readouterr().err.splitlines()
    assert (
        warning
        == "crs-controller convert: warning: fleet/cni: spec.foo has no counterpart; left out"
    )
    assert main(["convert", "-f", str(tmp_path / "absent.yaml")]) == 2
    assert capsys.readouterr().err.startswith("crs-controller convert: ")


def test_ctrl_c_exits_130_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Interrupted:
        def read(self) -> str:
            raise KeyboardInterrupt

    monkeypatch.setattr("sys.stdin", Interrupted())
    assert main(["render", "-f", "-"]) == 130
    assert capsys.readouterr().err == ""


def test_a_file_name_is_printed_without_control_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["hash", "-f", str(tmp_path / "a\x1b[31m.yaml")]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "No such file or directory" in err


@pytest.mark.parametrize("metadata", [[1], {"labels": ["a"]}, {"labels": {"a": [1]}}])
def test_a_malformed_cluster_or_source_is_an_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], metadata: Any
) -> None:
    crs = Path(__file__).parents[2] / "config/samples/addons_v1alpha1_clusterresourceset.yaml"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"kind": "Cluster", "metadata": metadata}))
    assert main(["render", "-f", str(crs), "--cluster", str(cluster)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"crs-controller render: {cluster}: Cluster: invalid metadata: ")
    assert ": :" not in err
    source = tmp_path / "cm.yaml"
    source.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": [1]}))
    assert main(["render", "-f", str(crs), "-f", str(source)]) == 2
    assert main(["hash", "-f", str(source)]) == 0


def test_status_timeout_is_for_watch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--timeout", "5s"]) == 2
    assert capsys.readouterr().err == "crs-controller status: --timeout is for --watch\n"
    code, _, err = exits(capsys, ["status", "-w", "--timeout", "soon"])
    # The value given is never repeated (it could be a secret put in the wrong place).
    assert code == 2 and "argument --timeout: invalid duration '…'" in err and "soon" not in err


def record(name: str, *clusters: dict[str, Any], ns: str = "fleet") -> dict[str, Any]:
    return {
        "namespace": ns,
        "name": name,
        "revision": "xxh3:1234567890abcdef",
        "rollout": None,
        "ready": "True",
        "reason": "Applied",
        "message": f"applied to {len(clusters)} clusters",
        "paused": False,
        "clusters": list(clusters),
    }


def row(cluster: str, reason: str = "Applied", applied: bool = True) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "revision": "xxh3:1234567890abcdef",
        "applied": applied,
        "reason": reason,
        "message": "",
        "since": None,
        "lastApplied": "2026-11-22T10:00:00Z" if applied else None,
    }


def doc(*records: dict[str, Any]) -> dict[str, Any]:
    return {"clusterResourceSets": list(records)}


def test_watch_prints_the_table_then_only_changed_rows_in_its_columns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shown = _Printer("table")
    shown.first(doc(record("cni", row("prod-1"))), "fleet")
    first = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in first] == [["CRS", "CLUSTER"], ["fleet/cni", "prod-1"]]
    shown.changes(doc(record("cni", row("prod-1"))))  # nothing changed: nothing printed
    assert capsys.readouterr().out == ""
    shown.changes(doc(record("cni", row("prod-1"), row("prod-22", "Pending", applied=False))))
    (added,) = capsys.readouterr().out.splitlines()
    assert added.split() == [
        "fleet/cni",
        "prod-22",
        "xxh3:1234567890ab",
        "no",
        "true",
        "Pending",
        "-",
        "Ready",  # STATE: the CRS's own
        *["-"] * 4,  # no rollout: ROLLOUT, STEP, WAITING, HELD
    ]
    assert added.index("prod-22") == first[1].index("prod-1")  # the first table's columns
    shown.changes(doc(record("cni", row("prod-1"), row("prod-22"))))
    (applied,) = capsys.readouterr().out.splitlines()
    assert applied.split()[1] == "prod-22" and "Applied" in applied


def test_nothing_found_goes_to_stderr_and_the_header_comes_with_the_first_row(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shown = _Printer("table")
    shown.first(doc(), "fleet")
    assert capsys.readouterr() == ("", "No resources found in fleet namespace.\n")
    _Printer("name").first(doc(), None)
    assert capsys.readouterr() == ("", "No resources found.\n")
    shown.changes(doc(record("cni")))
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [["CRS", "CLUSTER"], ["fleet/cni", "-"]]


def test_watch_with_o_name_and_json_prints_each_changed_crs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    names = _Printer("name")
    names.first(doc(record("a"), record("b")), "fleet")
    assert capsys.readouterr().out == (
        "clusterresourceset.addons.crs.dev/a\nclusterresourceset.addons.crs.dev/b\n"
    )
    names.changes(doc(record("a"), record("b", row("c1"))))
    assert capsys.readouterr().out == "clusterresourceset.addons.crs.dev/b\n"

    objects = _Printer("json")
    objects.first(doc(record("a")), "fleet")
    assert json.loads(capsys.readouterr().out) == doc(record("a"))
    objects.changes(doc(record("a", row("c1"))))
    assert json.loads(capsys.readouterr().out) == record("a", row("c1"))


def test_run_refuses_an_unknown_extension_hook(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = exits(capsys, ["run", "--extension-hooks", "BeforeClusterDelete,AfterUpgrade"])
    assert code == 2
    assert "hooks are some of BeforeClusterDelete" in err


@pytest.mark.parametrize(
    ("given", "error"),
    [("soon", "argument --lease-duration: invalid duration '\\u2026'"),
     ("1s", "argument --lease-duration: a lease must last at least 3s")],
)  # fmt: skip
def test_run_reads_the_lease_duration_as_status_reads_its_timeout(
    capsys: pytest.CaptureFixture[str], given: str, error: str
) -> None:
    code, _, err = exits(capsys, ["run", "--lease-duration", given])
    assert code == 2 and error in err
    parser, _ = _parser()
    assert parser.parse_args(["run", "--lease-duration", "1m30s"]).lease_duration == 90.0


@pytest.mark.parametrize(
    ("fields", "state"),
    [
        ({}, "Ready"),
        ({"paused": True, "ready": "Unknown", "reason": "Paused"}, "Paused"),
        ({"paused": True}, "Paused"),  # before the controller has written it
        ({"ready": "False", "reason": "InvalidSpec"}, "InvalidSpec"),
        ({"ready": None, "reason": "InvalidSpec"}, "InvalidSpec"),
        ({"ready": "False", "reason": "RolloutHalted"}, "RolloutHalted"),
        ({"ready": None, "reason": None}, "-"),
    ],
)
def test_status_state_is_the_crs_own(fields: dict[str, Any], state: str) -> None:
    assert crs_state({**record("cni"), **fields}) == state


def test_wide_status_says_why_a_refused_spec_moves_nothing() -> None:
    problem = "spec.rollout.windows[0]: schedule: Bad hour"
    invalid = {"ready": "False", "reason": "InvalidSpec", "message": problem}
    shown = table_rows([{**record("cni", row("prod-1")), **invalid}], wide=True)
    ((_, cells),) = shown
    assert (cells[7], cells[-1]) == ("InvalidSpec", problem)
    assert cells[5] == "Applied"  # the cluster's outcome, as its binding records it
    alone = table_rows([{**record("cni"), **invalid}], wide=True)
    assert [cells[5:8] + cells[-1:] for _, cells in alone] == [
        ["InvalidSpec", "-", "InvalidSpec", problem]
    ]
    # Otherwise each row's own message.
    failing = {**row("prod-1", "ApplyFailed"), "message": "ConfigMap x: boom"}
    ((_, cells),) = table_rows([record("cni", failing)], wide=True)
    assert (cells[7], cells[-1]) == ("Ready", "ConfigMap x: boom")
