"""Resource hashes: stable under key order, metadata and Secret encoding; changed by any
content change; unambiguous framing."""

from __future__ import annotations

import base64
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.core.errors import WrongSecretType
from crs_controller.core.manifests.documents import RESOURCE_SECRET_TYPE
from crs_controller.core.manifests.hashing import content_hash, resource_hash

keys = st.text(st.sampled_from("abcdefgh.-_0123456789"), min_size=1, max_size=8)
contents = st.dictionaries(keys, st.text(max_size=40), min_size=1, max_size=6)


def configmap(data: dict[str, str], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "addons", "namespace": "default", **metadata},
        "data": data,
    }


def secret_data(data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": RESOURCE_SECRET_TYPE,
        "metadata": {"name": "addons", "namespace": "default"},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def secret_string_data(data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": RESOURCE_SECRET_TYPE,
        "metadata": {"name": "other-name", "namespace": "elsewhere", "resourceVersion": "9"},
        "stringData": data,
    }


def test_format() -> None:
    digest = content_hash([("a", b"b")])
    assert digest.startswith("xxh3:")
    assert len(digest) == len("xxh3:") + 16
    int(digest.removeprefix("xxh3:"), 16)


@pytest.mark.parametrize(
    ("entries", "digest"),
    [
        ([], "xxh3:2d06800538d394c2"),
        ([("k", b"v")], "xxh3:504735649a6d1ec8"),
        ([("calico.yaml", b"apiVersion: v1\n")], "xxh3:9017f4dc5647a96c"),
    ],
)
def test_known_values_are_stable_across_releases(
    entries: list[tuple[str, bytes]], digest: str
) -> None:
    # Bindings store these hashes: a changed framing would reapply everything everywhere.
    assert content_hash(entries) == digest


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ([("ab", b"c")], [("a", b"bc")]),
        ([("a", b"")], [("", b"a")]),
        ([("a", b"b"), ("c", b"d")], [("a", b"b\x00\x00\x00\x00\x00\x00\x00\x01cd")]),
        ([("a", b"")], []),
        ([("a", b"x")], [("a", b"x"), ("b", b"")]),
    ],
)
def test_framing_is_unambiguous(
    left: list[tuple[str, bytes]], right: list[tuple[str, bytes]]
) -> None:
    assert content_hash(left) != content_hash(right)


@given(contents, st.randoms())
def test_invariant_under_key_order(data: dict[str, str], rnd: random.Random) -> None:
    items = list(data.items())
    rnd.shuffle(items)
    assert resource_hash(configmap(dict(items))) == resource_hash(configmap(data))


@given(contents)
def test_invariant_under_metadata(data: dict[str, str]) -> None:
    plain = configmap(data)
    decorated = configmap(
        data,
        resourceVersion="12345",
        uid="0000-1111",
        labels={"team": "net"},
        annotations={"note": "x"},
        generation=4,
    )
    assert resource_hash(plain) == resource_hash(decorated)


@given(contents)
def test_invariant_under_secret_encoding(data: dict[str, str]) -> None:
    by_data = resource_hash(secret_data(data))
    assert by_data == resource_hash(secret_string_data(data))
    assert by_data == resource_hash(configmap(data)), "decoded content is what counts"


@given(contents)
def test_invariant_under_binary_data_encoding(data: dict[str, str]) -> None:
    binary = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    as_binary = configmap({}) | {"data": None, "binaryData": binary}
    assert resource_hash(as_binary) == resource_hash(configmap(data))


@given(contents, st.data())
def test_any_value_change_changes_the_hash(data: dict[str, str], draw: st.DataObject) -> None:
    key = draw.draw(st.sampled_from(sorted(data)))
    new_value = draw.draw(st.text(max_size=40).filter(lambda v: v != data[key]))
    assert resource_hash(configmap(data | {key: new_value})) != resource_hash(configmap(data))


@given(contents, st.data())
def test_adding_renaming_or_removing_a_key_changes_the_hash(
    data: dict[str, str], draw: st.DataObject
) -> None:
    before = resource_hash(configmap(data))
    key = draw.draw(st.sampled_from(sorted(data)))
    new_key = draw.draw(keys.filter(lambda k: k not in data))
    renamed = {new_key if k == key else k: v for k, v in data.items()}
    removed = {k: v for k, v in data.items() if k != key}
    added = data | {new_key: ""}
    assert len({before, *(resource_hash(configmap(d)) for d in (renamed, removed, added))}) == 4


def test_stringdata_override_is_what_is_hashed() -> None:
    mixed = secret_data({"a": "old", "b": "b"}) | {"stringData": {"a": "new"}}
    assert resource_hash(mixed) == resource_hash(secret_string_data({"a": "new", "b": "b"}))


def test_wrong_secret_type_has_no_hash() -> None:
    with pytest.raises(WrongSecretType):
        resource_hash(secret_data({"a": "b"}) | {"type": "Opaque"})
