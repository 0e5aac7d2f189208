"""Names that count how often they are compared, for tests of how much a lookup
looks at: a scan compares the name it looks for with every name it passes, a lookup
in a dict or a set with one or two."""

from __future__ import annotations


class Name(str):
    compared = 0  # set it to 0, then do what is measured

    def __eq__(self, other: object) -> bool:
        Name.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def names(prefix: str, count: int) -> list[Name]:
    return [Name(f"{prefix}{i}") for i in range(count)]
