"""The ``crs-controller hash`` command: it prints the hash the controller computes
(ConfigMaps; resource-set Secrets however encoded; stdin with ``-``; ``-f`` or the
positional file; one line per source when a file has several documents; ``-o``),
and fails with exit status 2 and one clear line on stderr for a wrong Secret type
(without the Secret's content), a missing file and invalid YAML."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from crs_controller.app.cli import main
from crs_controller.core.manifests.hashing import resource_hash

MANIFEST = """\
apiVersion: v1
kind: Namespace
metadata:
  name: calico-system
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: calico-node
  namespace: kube-system
"""
SECRET_TEXT = (
    "apiVersion: v1\nkind: Secret\nmetadata: {name: token}\nstringData: {t: s3cr3t-value}\n"
)
RESOURCE_SET = "addons.cluster.x-k8s.io/resource-set"

CONFIGMAP: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "calico-addon", "namespace": "default", "resourceVersion": "12"},
    "data": {"calico.yaml": MANIFEST, "z-extra.json": '{"apiVersion": "v1"}'},
}


def secret(type_: str = RESOURCE_SET, *, encoded: bool) -> dict[str, Any]:
    content = {"calico.yaml": MANIFEST, "token.yaml": SECRET_TEXT}
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": type_,
        "metadata": {"name": "calico-secret", "namespace": "default"},
    }
    if encoded:
        obj["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in content.items()}
    else:
        obj["stringData"] = content
    return obj


def write(tmp_path: Path, obj: Any, name: str = "resource.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(obj) if not isinstance(obj, str) else obj, encoding="utf-8")
    return path


def run_hash(capsys: pytest.CaptureFixture[str], arg: str) -> tuple[int, str, str]:
    code = main(["hash", arg])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(CONFIGMAP, id="configmap"),
        pytest.param(secret(encoded=True), id="secret data"),
        pytest.param(secret(encoded=False), id="secret stringData"),
    ],
)
def test_hash_prints_the_controllers_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], obj: dict[str, Any]
) -> None:
    code, out, err = run_hash(capsys, str(write(tmp_path, obj)))
    assert code == 0
    assert err == ""
    assert out == resource_hash(obj) + "\n"
    assert out.startswith("xxh3:")


def test_secret_encoding_does_not_change_the_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, plain, _ = run_hash(capsys, str(write(tmp_path, secret(encoded=False), "plain.yaml")))
    _, encoded, _ = run_hash(capsys, str(write(tmp_path, secret(encoded=True), "b64.yaml")))
    assert plain == encoded
    assert plain.startswith("xxh3:")


def test_json_files_are_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cm.json"
    path.write_text(json.dumps(CONFIGMAP), encoding="utf-8")
    code, out, _ = run_hash(capsys, str(path))
    assert code == 0
    assert out == resource_hash(CONFIGMAP) + "\n"


def test_metadata_does_not_change_the_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The same content under another name, with other labels, as `kubectl get -o yaml` shows.
    other = {
        **CONFIGMAP,
        "metadata": {"name": "copy", "labels": {"a": "b"}, "uid": "u", "resourceVersion": "99"},
    }
    _, first, _ = run_hash(capsys, str(write(tmp_path, CONFIGMAP, "a.yaml")))
    _, second, _ = run_hash(capsys, str(write(tmp_path, other, "b.yaml")))
    assert first == second


def test_hash_reads_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(CONFIGMAP)))
    code, out, err = run_hash(capsys, "-")
    assert code == 0
    assert err == ""
    assert out == resource_hash(CONFIGMAP) + "\n"


def assert_one_line_error(code: int, out: str, err: str) -> None:
    assert code == 2
    assert out == ""
    assert err.endswith("\n")
    assert err.count("\n") == 1, err
    assert "Traceback" not in err


@pytest.mark.parametrize("encoded", [True, False])
def test_wrong_secret_type_fails_without_showing_the_content(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], encoded: bool
) -> None:
    obj = secret("Opaque", encoded=encoded)
    code, out, err = run_hash(capsys, str(write(tmp_path, obj)))
    assert_one_line_error(code, out, err)
    assert "WrongSecretType" in err
    assert "calico-secret" in err
    for value in [*obj.get("data", {}).values(), *obj.get("stringData", {}).values()]:
        assert value not in err
    assert "s3cr3t-value" not in err
    assert base64.b64encode(SECRET_TEXT.encode()).decode() not in err


def test_a_secret_without_a_type_is_opaque(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    obj = secret(encoded=True)
    del obj["type"]
    code, out, err = run_hash(capsys, str(write(tmp_path, obj)))
    assert_one_line_error(code, out, err)
    assert "WrongSecretType" in err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nope.yaml"
    code, out, err = run_hash(capsys, str(path))
    assert_one_line_error(code, out, err)
    assert str(path) in err
    assert "No such file" in err


def test_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_hash(capsys, str(tmp_path))
    assert_one_line_error(code, out, err)
    assert str(tmp_path) in err


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("kind: ConfigMap\ndata: {a: b\n", None),
        ("kind: ConfigMap\ndata:\n  a: b\n   c: d\n", 4),
        ("kind: ConfigMap\n\tdata: {}\n", 2),
    ],
)
def test_invalid_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, line: int | None
) -> None:
    path = write(tmp_path, text)
    code, out, err = run_hash(capsys, str(path))
    assert_one_line_error(code, out, err)
    assert str(path) in err
    assert "invalid YAML" in err
    if line is not None:
        assert f"line {line}" in err


def test_invalid_yaml_on_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("data: [unclosed\n"))
    code, out, err = run_hash(capsys, "-")
    assert_one_line_error(code, out, err)
    assert "invalid YAML" in err


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param("", "ConfigMap or Secret", id="empty file"),
        pytest.param("- a\n- b\n", "document 1: not an object", id="a list"),
        pytest.param("just text\n", "document 1: not an object", id="a scalar"),
        pytest.param(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
            "no ConfigMap or Secret (found Deployment)",
            id="another kind",
        ),
        pytest.param(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: 1}\n",
            "InvalidManifest",
            id="a non-string value",
        ),
    ],
)
def test_not_a_configmap_or_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    code, out, err = run_hash(capsys, str(write(tmp_path, content)))
    assert_one_line_error(code, out, err)
    assert expected in err


def test_a_file_that_is_not_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "addon.yaml.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe binary")
    code, out, err = run_hash(capsys, str(path))
    assert_one_line_error(code, out, err)
    assert str(path) in err


def several(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    """What `convert` prints and the book's example is: a CRS and its sources."""
    crs = {"apiVersion": "addons.crs.dev/v1alpha1", "kind": "ClusterResourceSet"}
    crs["metadata"] = {"name": "calico", "namespace": "default"}
    sources = [CONFIGMAP, secret(encoded=True)]
    path = tmp_path / "several.yaml"
    path.write_text(yaml.safe_dump_all([crs, *sources]), encoding="utf-8")
    return path, sources


def test_several_documents_hash_each_source_one_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, (configmap, secret_) = several(tmp_path)
    assert main(["hash", "-f", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out == (
        f"{resource_hash(configmap)}  ConfigMap/default/calico-addon\n"
        f"{resource_hash(secret_)}  Secret/default/calico-secret\n"
    )


@pytest.mark.parametrize("form", [["-f"], ["--filename"], []], ids=["-f", "--filename", "file"])
def test_the_file_is_given_with_f_or_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], form: list[str]
) -> None:
    assert main(["hash", *form, str(write(tmp_path, CONFIGMAP))]) == 0
    assert capsys.readouterr().out == resource_hash(CONFIGMAP) + "\n"


def test_f_repeats_and_reads_directories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "addons"
    folder.mkdir()
    write(folder, CONFIGMAP, "a.yaml")
    other = {**CONFIGMAP, "metadata": {"name": "other"}, "data": {"x": "z"}}
    lone = write(tmp_path, other, "lone.yaml")
    assert main(["hash", "-f", str(folder), "-f", str(lone)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[1] for line in lines] == [
        "ConfigMap/default/calico-addon",
        "ConfigMap/-/other",
    ]


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_o_json_and_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str) -> None:
    path, (configmap, secret_) = several(tmp_path)
    assert main(["hash", "-f", str(path), "-o", output]) == 0
    out = capsys.readouterr().out
    loaded = json.loads(out) if output == "json" else yaml.safe_load(out)
    assert loaded == {
        "resources": [
            {
                "kind": "ConfigMap",
                "namespace": "default",
                "name": "calico-addon",
                "hash": resource_hash(configmap),
            },
            {
                "kind": "Secret",
                "namespace": "default",
                "name": "calico-secret",
                "hash": resource_hash(secret_),
            },
        ]
    }


def test_o_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = several(tmp_path)
    assert main(["hash", "-f", str(path), "-o", "name"]) == 0
    assert capsys.readouterr().out == "configmap/calico-addon\nsecret/calico-secret\n"


def test_one_refused_source_among_several_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump_all([CONFIGMAP, secret("Opaque", encoded=True)]))
    code, out, err = run_hash(capsys, str(path))
    assert_one_line_error(code, out, err)
    assert "document 2" in err and "WrongSecretType" in err


def test_no_file_at_all(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_hash_args(capsys, [])
    assert_one_line_error(code, out, err)
    assert "-f FILE" in err


def run_hash_args(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    code = main(["hash", *args])
    out, err = capsys.readouterr()
    return code, out, err
