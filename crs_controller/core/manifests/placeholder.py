"""The mark a plain YAML scalar such as ``mtu: ${MTU}`` carries through parsing.

Substitution works on parsed values, and a plain scalar that is exactly one
``${...}`` reference takes the type of its value (``1450`` an int). Whether a scalar
was plain or quoted is known only while parsing, so the loader in
:mod:`crs_controller.core.manifests.documents` builds such scalars as :class:`Placeholder`, a
``str`` that is equal to, hashes like and JSON-encodes as its text: code that does
not substitute never sees a difference. This module sits below both ``manifests``
and ``substitute`` so that neither imports the other for it.
"""

from __future__ import annotations

import re
from typing import Any

from yaml.representer import SafeRepresenter

__all__ = ["PLACEHOLDER_TAG", "REFERENCE", "Placeholder"]

# One reference, as clusterctl writes them: ${NAME}, ${NAME:=default}, ${NAME:-default}.
# The default runs to the first "}"; a default holding "${" is refused by substitute.
REFERENCE = re.compile(
    r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::(?P<op>[=-])(?P<default>[^}]*))?\}"
)

# The tag the loader resolves such plain scalars to; never written by anyone.
PLACEHOLDER_TAG = "tag:crs.dev,2025:placeholder"


class Placeholder(str):
    """A plain (unquoted) YAML scalar whose whole text is one ``${...}`` reference."""

    __slots__ = ()


def _represent(dumper: SafeRepresenter, data: Placeholder) -> Any:
    # PyYAML's safe dumpers pick a representer by exact type and refuse unknown ones,
    # so `render -o yaml` and `convert` would fail on a Placeholder. As a multi
    # representer on SafeRepresenter it reaches SafeDumper and its subclasses, and
    # goes through their own str representer (convert's literal blocks included).
    return dumper.represent_data(str(data))


SafeRepresenter.add_multi_representer(Placeholder, _represent)
