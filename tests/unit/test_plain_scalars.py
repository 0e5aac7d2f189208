"""Plain YAML scalars and mapping keys read as kubectl and Cluster API read them
(go-yaml v2 through sigs.k8s.io/yaml): booleans y/n, floats without a dot, Go integer
literals, numbers past 64 bits, merge keys, and keys spelled as JSON spells them.
The expected values are go-yaml v2's own results for the same text."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.core.errors import InvalidManifest
from crs_controller.core.manifests.documents import parse_objects
from crs_controller.core.manifests.scalars import (
    BOOL,
    FLOAT,
    INT,
    MERGE,
    NULL,
    STR,
    json_key,
    resolve_plain,
)

HEADER = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"


def parsed(body: str) -> dict[str, Any]:
    source = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "addons", "namespace": "default"},
        "data": {"k": HEADER + body},
    }
    (obj,) = parse_objects(source)
    return obj


@pytest.mark.parametrize(
    ("text", "tag", "value"),
    [
        *(("y", BOOL, True), ("Y", BOOL, True), ("n", BOOL, False), ("N", BOOL, False)),
        *(("yes", BOOL, True), ("On", BOOL, True), ("OFF", BOOL, False), ("oN", STR, "oN")),
        *(("tRUE", STR, "tRUE"), ("~", NULL, None), ("Null", NULL, None), ("", NULL, None)),
        *(("1e3", FLOAT, 1000.0), ("-1E-3", FLOAT, -0.001), ("1.0e+3", FLOAT, 1000.0)),
        *(("09", FLOAT, 9.0), ("08.5", FLOAT, 8.5), ("1.", FLOAT, 1.0), (".5", FLOAT, 0.5)),
        *((".5_0", FLOAT, 0.5), ("1_0.5", FLOAT, 10.5), ("1e400", STR, "1e400")),
        *(("0o17", INT, 15), ("0O17", INT, 15), ("017", INT, 15), ("0X1F", INT, 31)),
        *(("0B11", INT, 3), ("0b-1", INT, -1), ("1_000", INT, 1000), ("1_", INT, 1)),
        *(("-0", INT, 0), ("9223372036854775807", INT, 2**63 - 1)),
        ("18446744073709551615", INT, 2**64 - 1),
        ("-9223372036854775809", FLOAT, -9.223372036854775808e18),
        ("0x10000000000000000", STR, "0x10000000000000000"),
        *(("2024-01-02", STR, "2024-01-02"), ("10:30", STR, "10:30"), ("0x", STR, "0x")),
        *(("+", STR, "+"), ("<<", MERGE, "<<"), ("1" * 5000, STR, "1" * 5000)),
    ],
)
def test_plain_scalars_resolve_as_go_yaml_v2(text: str, tag: str, value: Any) -> None:
    assert resolve_plain(text) == (tag, value)


@pytest.mark.parametrize("text", [".nan", ".inf", "-.INF", "+.Inf"])
def test_go_yaml_reads_nan_and_inf_as_floats(text: str) -> None:
    tag, value = resolve_plain(text)
    assert tag == FLOAT
    assert not math.isfinite(value)


def test_a_manifest_reads_y_and_1e3_as_kubectl_sends_them() -> None:
    big = "0x1" + "0" * 16
    obj = parsed(f"spec: {{enabled: y, debug: N, replicas: 1e3, mode: 0o644, big: {big}}}\n")
    assert obj["spec"] == {
        "enabled": True,
        "debug": False,
        "replicas": 1000.0,
        "mode": 420,
        "big": big,
    }


def test_quoted_and_block_scalars_stay_strings() -> None:
    obj = parsed("data:\n  a: 'y'\n  b: \"1e3\"\n  c: |-\n    n\n")
    assert obj["data"] == {"a": "y", "b": "1e3", "c": "n"}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("!!int 0o17", 15),
        ("!!float 1", 1.0),
        ("!!bool y", True),
        ("!!bool 'N'", False),
        ("!!null ~", None),
    ],
)
def test_explicit_tags_read_the_text_as_go_yaml_does(text: str, value: Any) -> None:
    assert parsed(f"spec: {text}\n")["spec"] == value


@pytest.mark.parametrize("text", ["!!int 1e3", "!!null x", "!!bool yes_", "!!float .inf"])
def test_explicit_tags_go_yaml_refuses(text: str) -> None:
    with pytest.raises(InvalidManifest, match="the value cannot be read as"):
        parsed(f"spec: {text}\n")


def test_merged_pairs_stand_where_the_merge_key_stands() -> None:
    # go-yaml v2 decodes a "<<" entry in place: earlier keys are overridden, later
    # ones override, and of a list of mappings the earlier ones win.
    obj = parsed("base: &b {a: 1, c: 1}\nspec: {a: 0, b: 0, <<: [*b, {a: 2, b: 2}], c: 3}\n")
    assert obj["spec"] == {"a": 1, "b": 2, "c": 3}


def test_merge_key_as_a_value_is_a_string() -> None:
    assert parsed("spec: {a: <<}\n")["spec"] == {"a": "<<"}


def test_a_merge_of_a_scalar_is_refused() -> None:
    with pytest.raises(InvalidManifest, match="a merge key needs a mapping"):
        parsed("spec: {<<: 1}\n")


def test_keys_are_spelled_as_sigs_yaml_spells_them() -> None:
    obj = parsed("spec: {y: 1, no: 2, 1e3: 3, 0x10: 4, 1.5: 5, 123456789.0: 6, z: 7}\n")
    assert obj["spec"] == {
        "true": 1,
        "false": 2,
        "1000": 3,
        "16": 4,
        "1.5": 5,
        "1.2345679e+08": 6,
        "z": 7,
    }


@pytest.mark.parametrize("key", ["~", "18446744073709551615"])
def test_keys_sigs_yaml_refuses(key: str) -> None:
    with pytest.raises(InvalidManifest, match="a mapping key must be"):
        parsed(f"spec: {{{key}: 1}}\n")


@pytest.mark.parametrize(
    ("key", "text"),
    [
        (1000.0, "1000"),
        (1e6, "1e+06"),
        (100000.0, "100000"),
        (1234567.0, "1.234567e+06"),
        (1.5e-5, "1.5e-05"),
        (0.0001, "0.0001"),
        (16777217.0, "1.6777216e+07"),
        (-0.0, "-0"),
        (1e39, ".inf"),
        (True, "true"),
        (-(2**63), "-9223372036854775808"),
        (2**63, None),
        (None, None),
    ],
)
def test_json_key(key: object, text: str | None) -> None:
    assert json_key(key) == text


@given(st.text(alphabet="0123456789+-._eExXoObBynYN~<", min_size=1, max_size=8))
def test_the_reader_keeps_the_resolved_value(text: str) -> None:
    tag, value = resolve_plain(text)
    if tag in (STR, MERGE) or (tag == FLOAT and not math.isfinite(value)):
        return
    assert parsed(f"spec: [{text}]\n")["spec"] == [value]
