"""``spec.dependsOn`` between the ClusterResourceSets of one namespace: may a CRS apply
on a cluster now, and in which order several CRSs are applied or removed.

Everything here is a pure function of the dependency graph (CRS name -> the names in
its ``dependsOn``, in spec order; a name that is not a key does not exist) and, for
``gate``, of two questions the caller answers about one cluster. Cycle detection and
ordering never read the order of the graph's keys or of ``names``, so every replica
and every reconcile reaches the same answer and names the same cycle.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "Cycle",
    "Gate",
    "Go",
    "NotFound",
    "Wait",
    "apply_order",
    "cycles",
    "describe",
    "gate",
    "removal_order",
]

Graph = Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class Go:
    """Every dependency that selects the cluster is done there: the CRS may apply."""


@dataclass(frozen=True)
class Wait:
    """``DependencyNotReady``: the first dependency (spec order) not yet done here."""

    waiting_for: str


@dataclass(frozen=True)
class NotFound:
    """``DependencyNotFound``: the first dependency (spec order) that does not exist."""

    missing: str


@dataclass(frozen=True)
class Cycle:
    """``DependencyCycle``: a cycle through this CRS, starting from its smallest name."""

    members: tuple[str, ...]


Gate = Go | Wait | NotFound | Cycle


def cycles(graph: Graph) -> dict[str, tuple[str, ...]]:
    """Every CRS on a cycle -> a shortest cycle through it, starting from its smallest name.

    A CRS that merely depends on a cycle is not on it: it is only blocked (``gate``
    makes it wait), so it is left out. In a tangle of several cycles each member names
    one that passes through itself, which is the one its owner can act on.
    """
    found: dict[str, tuple[str, ...]] = {}
    for component in _components(graph, graph):
        if _is_cyclic(component, graph):
            within = frozenset(component)
            for name in component:
                found[name] = _cycle_through(name, graph, within)
    return dict(sorted(found.items()))


def gate(
    crs: str,
    graph: Graph,
    selects: Callable[[str], bool],
    done: Callable[[str], bool],
) -> Gate:
    """Whether ``crs`` may apply on one cluster, and if not, what holds it back.

    In order: ``Cycle`` if ``crs`` is on a cycle (nothing in a cycle can ever go first);
    ``NotFound`` for the first dependency that does not exist; ``Wait`` for the first
    dependency that selects this cluster (``selects(name)``) and is not done there;
    else ``Go``. A dependency that does not select the cluster is never waited for.

    ``done(name)`` says whether that CRS is applied on this cluster at its current
    revision (and Ready if it asks to be waited for). A dependency that is itself
    blocked here (on a cycle, missing a dependency, or waiting) counts as not done
    whatever ``done`` says, so a CRS that depends on a cycle waits for it rather than
    being reported as part of it, and nothing is applied on top of a dependency that
    is stuck.
    """
    components = _components(graph, _reachable(graph, crs))
    cyclic = {name for c in components if _is_cyclic(c, graph) for name in c}
    if crs in cyclic:
        component = next(c for c in components if crs in c)
        return Cycle(_cycle_through(crs, graph, frozenset(component)))
    clear: set[str] = set()

    def ready(name: str) -> bool:
        return name in clear and done(name)

    # Components come dependencies first, so each CRS is judged after all it needs.
    for component in components:
        for name in component:
            if name not in cyclic and isinstance(_blocker(name, graph, selects, ready), Go):
                clear.add(name)
    return _blocker(crs, graph, selects, ready)


def apply_order(names: Iterable[str], graph: Graph) -> list[str]:
    """``names`` with every CRS after those it depends on, directly or through CRSs not
    in ``names``; ties (and the members of a cycle among themselves) by name.

    The order is the smallest by name among the valid ones, so it does not depend on
    the order ``names`` came in. A name missing from ``graph`` (a CRS already gone
    whose objects are being removed) still counts as what its dependents need.
    """
    wanted = sorted(set(names))
    known = {name: () for name in wanted} | dict(graph)
    needs = {name: (_reachable(known, name) - {name}).intersection(wanted) for name in wanted}
    # Members of one cycle need each other; dropping those pairs leaves an order.
    after = {name: {d for d in needs[name] if name not in needs[d]} for name in wanted}
    dependents: dict[str, list[str]] = {name: [] for name in wanted}
    for name in wanted:
        for dependency in after[name]:
            dependents[dependency].append(name)
    pending = {name: len(after[name]) for name in wanted}
    ready = [name for name in wanted if not pending[name]]
    ordered: list[str] = []
    while ready:
        name = heapq.heappop(ready)
        ordered.append(name)
        for dependent in dependents[name]:
            pending[dependent] -= 1
            if not pending[dependent]:
                heapq.heappush(ready, dependent)
    return ordered


def removal_order(names: Iterable[str], graph: Graph) -> list[str]:
    """The reverse of ``apply_order``: the objects of a dependent CRS are deleted before
    those of the CRSs it depends on, so nothing is left running on top of what it needs."""
    return apply_order(names, graph)[::-1]


def describe(gate: Gate) -> tuple[str, str]:
    """The outcome (reason, message) for a gate; ``("", "")`` for ``Go``."""
    match gate:
        case Wait(waiting_for=name):
            return "DependencyNotReady", f"waiting for ClusterResourceSet {name}"
        case NotFound(missing=name):
            return "DependencyNotFound", f"ClusterResourceSet {name} does not exist"
        case Cycle(members=members):
            return "DependencyCycle", "dependency cycle: " + " -> ".join((*members, members[0]))
        case Go():
            return "", ""


def _blocker(
    name: str, graph: Graph, selects: Callable[[str], bool], ready: Callable[[str], bool]
) -> Gate:
    """What holds ``name`` back, cycles aside: every missing dependency comes first,
    since no wait can ever end it."""
    dependencies = graph.get(name, ())
    for dependency in dependencies:
        if dependency not in graph:
            return NotFound(dependency)
    for dependency in dependencies:
        if selects(dependency) and not ready(dependency):
            return Wait(dependency)
    return Go()


def _links(graph: Graph, name: str) -> list[str]:
    """The existing CRSs ``name`` depends on, by name, so walks never follow spec order."""
    return sorted({d for d in graph.get(name, ()) if d in graph})


def _reachable(graph: Graph, start: str) -> set[str]:
    """``start`` and every CRS it depends on, directly or not."""
    seen = {start}
    todo = [start]
    while todo:
        for linked in _links(graph, todo.pop()):
            if linked not in seen:
                seen.add(linked)
                todo.append(linked)
    return seen


def _is_cyclic(component: Sequence[str], graph: Graph) -> bool:
    return len(component) > 1 or component[0] in graph.get(component[0], ())


def _cycle_through(start: str, graph: Graph, within: frozenset[str]) -> tuple[str, ...]:
    """A shortest cycle from ``start`` back to it inside its component (breadth first,
    links by name, so the same graph always names the same cycle)."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for linked in _links(graph, node):
            if linked == start:
                return _from_smallest(_path(parent, start, node))
            if linked in within and linked not in parent:
                parent[linked] = node
                queue.append(linked)
    return ()


def _path(parent: Mapping[str, str], start: str, end: str) -> tuple[str, ...]:
    path = [end]
    while path[-1] != start:
        path.append(parent[path[-1]])
    return tuple(reversed(path))


def _from_smallest(members: tuple[str, ...]) -> tuple[str, ...]:
    first = members.index(min(members))
    return members[first:] + members[:first]


def _components(graph: Graph, nodes: Iterable[str]) -> list[tuple[str, ...]]:
    """Strongly connected components of ``nodes`` (closed under links), each sorted,
    dependencies before their dependents (Tarjan, without recursion: a long chain of
    CRSs must not reach Python's recursion limit)."""
    tarjan = _Tarjan(graph)
    for root in sorted(nodes):
        if root not in tarjan.index:
            tarjan.visit(root)
    return tarjan.found


class _Tarjan:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.index: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.stack: list[str] = []
        self.on_stack: set[str] = set()
        self.found: list[tuple[str, ...]] = []

    def visit(self, root: str) -> None:
        work = [(root, iter(self._enter(root)))]
        while work:
            node, links = work[-1]
            for linked in links:
                if linked not in self.index:
                    work.append((linked, iter(self._enter(linked))))
                    break
                if linked in self.on_stack:
                    self.low[node] = min(self.low[node], self.index[linked])
            else:
                work.pop()
                if work:
                    caller = work[-1][0]
                    self.low[caller] = min(self.low[caller], self.low[node])
                if self.low[node] == self.index[node]:
                    self._close(node)

    def _enter(self, node: str) -> list[str]:
        self.index[node] = self.low[node] = len(self.index)
        self.stack.append(node)
        self.on_stack.add(node)
        return _links(self.graph, node)

    def _close(self, root: str) -> None:
        members: list[str] = []
        while not members or members[-1] != root:
            members.append(self.stack.pop())
            self.on_stack.discard(members[-1])
        self.found.append(tuple(sorted(members)))
