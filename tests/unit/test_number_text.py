"""Numbers read from text others write (annotations, headers, command-line values) are
whole numbers in ASCII digits only: text that ``str.isdigit`` accepts but ``int``
refuses (superscripts such as "²") or reads (other scripts' digits) is refused or
ignored as malformed, never an exception that stops the reader."""

from __future__ import annotations

import argparse
import asyncio

import httpcore
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.app.cli import _positive
from crs_controller.app.commands.common import UsageError
from crs_controller.app.commands.dashboard import address
from crs_controller.clients.answers import read_answer
from crs_controller.clients.transport import Response
from crs_controller.core.rollout.plan import APPROVE_ANNOTATION
from crs_controller.core.rollout.snapshots import SIZE_ANNOTATION, SNAPSHOT_LABEL, size_of
from crs_controller.core.spec.objects import parse_crs, parse_source_meta

REV = "xxh3:0123456789abcdef"
# Each isdigit() but not ASCII: superscripts and circled digits int() refuses,
# Arabic-Indic, Devanagari and full-width digits it reads.
NOT_ASCII = ["²", "①", "1²", "٣", "१२", "\uff11\uff12"]


def approving(value: str) -> int | None:
    meta = {"name": "a", "namespace": "t", "annotations": {APPROVE_ANNOTATION: value}}
    return parse_crs({"metadata": meta, "spec": {"clusterSelector": {}}}).approved(REV)


@pytest.mark.parametrize("digits", NOT_ASCII)
def test_a_snapshots_size_in_other_digits_is_not_said(digits: str) -> None:
    assert size_of({SIZE_ANNOTATION: digits}) is None
    meta = {"name": "s", "labels": {SNAPSHOT_LABEL: "x"}, "annotations": {SIZE_ANNOTATION: digits}}
    assert parse_source_meta({"metadata": meta}).snapshot_bytes is None


@given(st.text(max_size=14))
def test_any_size_annotation_is_read_or_not_said(value: str) -> None:
    size = size_of({SIZE_ANNOTATION: value})
    assert size is None or str(size) == value.lstrip("0").rjust(1, "0")


@pytest.mark.parametrize("digits", NOT_ASCII)
def test_an_approval_of_a_step_in_other_digits_is_ignored(digits: str) -> None:
    assert approving(f"{REV}/{digits}") is None
    assert approving(f"{REV}/2") == 2


@given(st.text(max_size=6))
def test_any_approval_names_a_step_or_none(step: str) -> None:
    approved = approving(f"{REV}/{step}")
    assert approved is None or (step.isascii() and approved == int(step))


@pytest.mark.parametrize("digits", NOT_ASCII)
def test_a_positive_number_in_other_digits_is_a_usage_error(digits: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        _positive(digits)
    assert _positive("3") == 3


@pytest.mark.parametrize("digits", NOT_ASCII)
def test_a_port_in_other_digits_is_refused(digits: str) -> None:
    with pytest.raises(UsageError, match="HOST:PORT"):
        address(f"127.0.0.1:{digits}")


@pytest.mark.parametrize("declared", [b"\xb2", b"\xb3", b"1\xb9"])
def test_a_declared_length_in_other_digits_is_not_believed(declared: bytes) -> None:
    raw = httpcore.Response(200, headers=[(b"content-length", declared)], content=b"body")
    answer = Response(raw)
    assert asyncio.run(read_answer(answer, "here", 10)) == b"body"
