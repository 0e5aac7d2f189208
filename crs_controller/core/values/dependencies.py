"""``spec.dependsOn`` between the ClusterResourceSets of one namespace: may a CRS apply
on a cluster now, and in which order several CRSs are applied or removed.

Everything here is a pure function of the dependency graph (CRS name -> the names in
its ``dependsOn``, in spec order; a name that is not a key does not exist) and, for
``gate``, of two questions the caller answers about one cluster. Cycle detection and
ordering never read the order of the graph's keys or of ``names``, so every replica
and every reconcile reaches the same answer and names the same cycle.

``Dependencies`` holds what is derived from one graph (components, cycles, the
condensed order) so that it is worked out once per change of the namespace's CRSs,
not once per CRS and cluster: a tenant's tangle of dependsOn must not cost every
reconcile time quadratic in its size. The functions take a plain graph too.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

__all__ = [
    "Cycle",
    "Dependencies",
    "Gate",
    "Go",
    "Missing",
    "Wait",
    "cycles",
    "dependency_order",
    "describe",
    "gate",
    "removal_order",
]

Graph = Mapping[str, Sequence[str]]
_Questions = tuple[Callable[[str], bool], Callable[[str], bool], Callable[[str], bool]]


def _never(_: str) -> bool:
    return False


@dataclass(frozen=True)
class Go:
    """Every dependency that selects the cluster is done there: the CRS may apply."""


@dataclass(frozen=True)
class Wait:
    """``DependencyNotReady``: the first dependency (spec order) not yet done here;
    ``invalid`` when that is a CRS whose spec the controller refuses (it can never be
    done, and which clusters it would select is unknown)."""

    waiting_for: str
    invalid: bool = False


@dataclass(frozen=True)
class Missing:
    """``DependencyNotFound``: the first dependency (spec order) that does not exist."""

    missing: str


@dataclass(frozen=True)
class Cycle:
    """``DependencyCycle``: a cycle through this CRS, starting from its smallest name."""

    members: tuple[str, ...]


Gate = Go | Wait | Missing | Cycle


class Dependencies:
    """One namespace's dependency graph with what every reconcile derives from it,
    computed once per change of the graph rather than once per CRS: the links by name,
    the strongly connected components (which CRSs are on a cycle), and the cycle each
    member names (found on first use, then kept).

    Building it is O(V + E log d); a CRS's gate on one cluster is O(its dependencies)
    through ``gates``; an order of N names is O(V + E + N log N).
    """

    def __init__(self, graph: Graph) -> None:
        self.graph: dict[str, tuple[str, ...]] = {n: tuple(deps) for n, deps in graph.items()}
        self._links = {name: _links(graph, name) for name in graph}
        tarjan = _Tarjan(self._links)
        for root in sorted(graph):
            if root not in tarjan.index:
                tarjan.visit(root)
        # Components come dependencies first.
        self._components = tarjan.found
        self._component_of = {n: i for i, c in enumerate(self._components) for n in c}
        self._cyclic = frozenset(
            name for c in self._components if _is_cyclic(c, graph) for name in c
        )
        self._cycles: dict[str, tuple[str, ...]] = {}
        self._needs, self._dangling = self._condensed()

    def cycle(self, name: str) -> tuple[str, ...] | None:
        """A shortest cycle through ``name`` from its smallest member, or None. A BFS
        inside its component, done once per member and kept."""
        if name not in self._cyclic:
            return None
        found = self._cycles.get(name)
        if found is None:
            within = frozenset(self._components[self._component_of[name]])
            found = self._cycles[name] = _cycle_through(name, self._links, within)
        return found

    def cycles(self) -> dict[str, tuple[str, ...]]:
        """Every CRS on a cycle -> a shortest cycle through it (see ``cycles``)."""
        return {name: cycle for name in sorted(self._cyclic) if (cycle := self.cycle(name))}

    def gates(
        self,
        selects: Callable[[str], bool],
        done: Callable[[str], bool],
        refused: Callable[[str], bool] = _never,
    ) -> Callable[[str], Gate]:
        """``gate`` for every CRS on one cluster, each worked out once and kept: valid
        while the questions answer as they do now for the dependencies of the CRSs
        asked about (in ``dependency_order``, everything a CRS needs is settled first)."""
        known: dict[str, Gate] = {}
        questions = (selects, done, refused)

        def decide(crs: str) -> Gate:
            todo = [crs]
            while todo:  # depth first without recursion: chains may be long
                name = todo[-1]
                if name in known:
                    todo.pop()
                    continue
                decided = self._gate(name, questions, known)
                if isinstance(decided, str):
                    todo.append(decided)  # judge this dependency first
                else:
                    known[name] = decided
                    todo.pop()
            return known[crs]

        return decide

    def dependency_order(self, names: Iterable[str]) -> list[str]:
        """See ``dependency_order``: Kahn's algorithm over the components, smallest name first
        among what may go; a component none of ``names`` is in goes unseen at once."""
        wanted = set(names)
        extras = sorted(wanted - self.graph.keys())  # gone CRSs: needed, need nothing
        nodes = [*self._components, *((name,) for name in extras)]
        needs = [*self._needs, *([] for _ in extras)]
        extra = {name: len(self._components) + n for n, name in enumerate(extras)}
        for i, missing in self._dangling.items():
            needs[i] = [*needs[i], *(extra[m] for m in missing if m in extra)]
        return _kahn(nodes, needs, wanted)

    def _gate(self, name: str, questions: _Questions, known: Mapping[str, Gate]) -> Gate | str:
        """``name``'s gate, or a dependency whose own gate is needed first."""
        if (cycle := self.cycle(name)) is not None:
            return Cycle(cycle)
        dependencies = self.graph.get(name, ())
        for dependency in dependencies:
            if dependency not in self.graph:
                return Missing(dependency)
        selects, done, refused = questions
        for dependency in dependencies:
            if refused(dependency):
                return Wait(dependency, invalid=True)
            if not selects(dependency):
                continue
            if not done(dependency):
                return Wait(dependency)
            if dependency not in known:
                return dependency
            if not isinstance(known[dependency], Go):
                return Wait(dependency)  # done on paper, but itself held back
        return Go()

    def _condensed(self) -> tuple[list[list[int]], dict[int, list[str]]]:
        """Per component: the components it links to, and the names it depends on that
        do not exist (by name: they count in an order that includes them)."""
        needs: list[list[int]] = []
        dangling: dict[int, list[str]] = {}
        for i, component in enumerate(self._components):
            linked = {self._component_of[d] for n in component for d in self._links[n]}
            needs.append(sorted(linked - {i}))
            missing = {d for n in component for d in self.graph[n] if d not in self.graph}
            if missing:
                dangling[i] = sorted(missing)
        return needs, dangling


def cycles(graph: Graph) -> dict[str, tuple[str, ...]]:
    """Every CRS on a cycle -> a shortest cycle through it, starting from its smallest name.

    A CRS that merely depends on a cycle is not on it: it is only blocked (``gate``
    makes it wait), so it is left out. In a tangle of several cycles each member names
    one that passes through itself, which is the one its owner can act on.
    """
    return Dependencies(graph).cycles()


def gate(
    crs: str,
    graph: Graph | Dependencies,
    selects: Callable[[str], bool],
    done: Callable[[str], bool],
    refused: Callable[[str], bool] = _never,
) -> Gate:
    """Whether ``crs`` may apply on one cluster, and if not, what holds it back.

    In order: ``Cycle`` if ``crs`` is on a cycle (nothing in a cycle can ever go first);
    ``Missing`` for the first dependency that does not exist; ``Wait`` for the first
    dependency that the controller refuses (``refused(name)``: its spec is invalid, so
    it selects nothing it could say and depends on nothing it could say) or that
    selects this cluster (``selects(name)``) and is not done there; else ``Go``. A
    valid dependency that does not select the cluster is never waited for; a refused
    one always is, so an invalid CRS never lets its dependents (or the rest of a cycle
    it was on) apply.

    ``done(name)`` says whether that CRS is applied on this cluster at its current
    revision (and Ready if it asks to be waited for). A dependency that is itself
    blocked here (on a cycle, missing a dependency, or waiting) counts as not done
    whatever ``done`` says, so a CRS that depends on a cycle waits for it rather than
    being reported as part of it, and nothing is applied on top of a dependency that
    is stuck. For many CRSs on one cluster, use ``Dependencies.gates``.
    """
    return _built(graph).gates(selects, done, refused)(crs)


def dependency_order(names: Iterable[str], graph: Graph | Dependencies) -> list[str]:
    """``names`` with every CRS after those it depends on, directly or through CRSs not
    in ``names``; ties (and the members of a cycle among themselves) by name.

    The order is the smallest by name among the valid ones, so it does not depend on
    the order ``names`` came in. A name missing from ``graph`` (a CRS already gone
    whose objects are being removed) still counts as what its dependents need.
    """
    return _built(graph).dependency_order(names)


def removal_order(names: Iterable[str], graph: Graph | Dependencies) -> list[str]:
    """The reverse of ``dependency_order``: the objects of a dependent CRS are deleted before
    those of the CRSs it depends on, so nothing is left running on top of what it needs."""
    return dependency_order(names, graph)[::-1]


def describe(gate: Gate) -> tuple[str, str]:
    """The outcome (reason, message) for a gate; ``("", "")`` for ``Go``."""
    match gate:
        case Wait(waiting_for=name, invalid=True):
            return (
                "DependencyNotReady",
                f"waiting for ClusterResourceSet {name}: its spec is invalid",
            )
        case Wait(waiting_for=name):
            return "DependencyNotReady", f"waiting for ClusterResourceSet {name}"
        case Missing(missing=name):
            return "DependencyNotFound", f"ClusterResourceSet {name} does not exist"
        case Cycle(members=members):
            return "DependencyCycle", "dependency cycle: " + " -> ".join((*members, members[0]))
        case Go():
            return "", ""


def _links(graph: Graph, name: str) -> list[str]:
    """The existing CRSs ``name`` depends on, by name, so walks never follow spec order."""
    return sorted({d for d in graph.get(name, ()) if d in graph})


def _is_cyclic(component: Sequence[str], graph: Graph) -> bool:
    return len(component) > 1 or component[0] in graph.get(component[0], ())


def _cycle_through(
    start: str, links: Mapping[str, Sequence[str]], within: frozenset[str]
) -> tuple[str, ...]:
    """A shortest cycle from ``start`` back to it inside its component (breadth first,
    links by name, so the same graph always names the same cycle)."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for linked in links[node]:
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


def _built(graph: Graph | Dependencies) -> Dependencies:
    return graph if isinstance(graph, Dependencies) else Dependencies(graph)


def _kahn(
    nodes: Sequence[Sequence[str]], needs: Sequence[Sequence[int]], wanted: AbstractSet[str]
) -> list[str]:
    """The smallest order by name of the ``wanted`` members of ``nodes`` (each node's
    members among themselves free) with every node after the nodes it ``needs``."""
    return _Kahn(nodes, needs, wanted).order()


class _Kahn:
    """Kahn's algorithm over nodes of names: a node is out once its wanted members
    are; its dependents are released once every node they need is out."""

    def __init__(
        self,
        nodes: Sequence[Sequence[str]],
        needs: Sequence[Sequence[int]],
        wanted: AbstractSet[str],
    ) -> None:
        self.nodes = nodes
        self.wanted = wanted
        self.left = [sum(name in wanted for name in node) for node in nodes]  # members to go
        self.pending = [len(n) for n in needs]  # nodes needed and not out yet
        self.dependents: list[list[int]] = [[] for _ in nodes]
        for i, needed in enumerate(needs):
            for j in needed:
                self.dependents[j].append(i)
        self.ready: list[tuple[str, int]] = []  # a heap: the smallest name goes first

    def order(self) -> list[str]:
        for root in [i for i, count in enumerate(self.pending) if not count]:
            self._release(root)  # a root's release may free later nodes: listed before any goes
        ordered: list[str] = []
        while self.ready:
            name, i = heapq.heappop(self.ready)
            ordered.append(name)
            self.left[i] -= 1
            if not self.left[i]:
                for dependent in self._finish(i):
                    self._release(dependent)
        return ordered

    def _release(self, start: int) -> None:
        """Everything ``start`` needs is out: its wanted members may go; a node with
        none is out at once and may release its dependents in turn."""
        todo = [start]
        while todo:
            i = todo.pop()
            if self.left[i]:
                for name in self.nodes[i]:
                    if name in self.wanted:
                        heapq.heappush(self.ready, (name, i))
                continue
            todo.extend(self._finish(i))

    def _finish(self, i: int) -> list[int]:
        """Node ``i`` is out: the dependents that needed nothing else."""
        freed = []
        for dependent in self.dependents[i]:
            self.pending[dependent] -= 1
            if not self.pending[dependent]:
                freed.append(dependent)
        return freed


class _Tarjan:
    def __init__(self, links: Mapping[str, Sequence[str]]) -> None:
        self.links = links
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
        return list(self.links[node])

    def _close(self, root: str) -> None:
        members: list[str] = []
        while not members or members[-1] != root:
            members.append(self.stack.pop())
            self.on_stack.discard(members[-1])
        self.found.append(tuple(sorted(members)))
