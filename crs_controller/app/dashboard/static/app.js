// The fleet page: draws what the server folds (one snapshot, then deltas from
// /events). Every string from the API is set as text (textContent), never as markup.
"use strict";
(() => {
  const STATES = ["Failed", "Unreachable", "Waiting", "Progressing", "Pending", "Ready"];
  const SYMBOLS = {
    Ready: "✓", Progressing: "↻", Waiting: "‖", Failed: "✗", Unreachable: "⊘", Pending: "○",
  };
  const model = { crs: new Map(), cells: new Map(), clusters: new Map() };
  const cellsOfCrs = new Map(); // CRS key -> Set of cell keys
  const cellsOfCluster = new Map(); // "namespace/cluster" -> Set of cell keys
  // What the page shows now, so a change to a cell already drawn is patched in place.
  let drawn = { route: null, cells: new Map() };
  let selected = null;
  let scheduled = false;
  let dirty = false;
  // Figures the benchmark reads (hack/bench/dashboard.py); nothing depends on them.
  const stats = { snapshots: 0, renderedAt: 0, cells: 0, deltas: 0, drawnAt: 0 };
  window.fleetStats = stats;

  const $ = (id) => document.getElementById(id);
  const main = $("main");
  const detail = $("detail");
  const live = $("live");
  const filters = { namespace: $("f-namespace"), state: $("f-state"), label: $("f-label") };

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function plural(n, noun) {
    return n + " " + noun + (n === 1 ? "" : "s");
  }

  function link(href, text) {
    const a = el("a", null, text);
    a.href = href;
    return a;
  }

  // --- the model -----------------------------------------------------------------

  function indexCell(key, cell, add) {
    const clusterKey = cell.crs.split("/")[0] + "/" + cell.cluster;
    for (const [index, at] of [[cellsOfCrs, cell.crs], [cellsOfCluster, clusterKey]]) {
      let keys = index.get(at);
      if (!keys) index.set(at, (keys = new Set()));
      if (add) keys.add(key); else keys.delete(key);
    }
  }

  function apply(part, set, removed) {
    const map = model[part];
    for (const key of removed || []) {
      if (part === "cells" && map.has(key)) indexCell(key, map.get(key), false);
      map.delete(key);
    }
    for (const [key, value] of Object.entries(set || {})) {
      if (part === "cells") {
        if (map.has(key)) indexCell(key, map.get(key), false);
        indexCell(key, value, true);
      }
      map.set(key, value);
    }
  }

  function snapshot(view) {
    for (const part of Object.keys(model)) model[part].clear();
    cellsOfCrs.clear();
    cellsOfCluster.clear();
    for (const part of Object.keys(model)) apply(part, view[part], []);
    namespaces();
    draw();
    stats.snapshots += 1;
    void main.offsetHeight; // laid out: what the first render costs, included
    stats.renderedAt = performance.now();
    stats.cells = main.querySelectorAll("button.cell").length;
  }

  function delta(change) {
    for (const part of Object.keys(model)) {
      if (change[part]) apply(part, change[part].set, change[part].removed);
    }
    stats.deltas += 1;
    if (!patch(change)) dirty = true;
    if (change.crs || change.clusters) namespaces();
    live.textContent = "live · changed " + new Date().toLocaleTimeString();
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(() => {
        scheduled = false;
        if (dirty) { dirty = false; draw(); }
        stats.drawnAt = Date.now();
      });
    }
  }

  // A change of cells already drawn, in the same step and still shown by the filters:
  // those cells and the CRS's header are redrawn, nothing else.
  function patch(change) {
    const route = drawn.route;
    if (!route || route.view !== "crs" || change.clusters) return false;
    const cells = change.cells || { set: {}, removed: [] };
    if (cells.removed.length) return false;
    const changed = Object.entries(cells.set).filter(([, c]) => c.crs === route.key);
    for (const [key, cell] of changed) {
      const shown = drawn.cells.get(key);
      if (!shown || shown.step !== cell.step || !passes(cell)) return false;
    }
    for (const [key, cell] of changed) {
      const shown = drawn.cells.get(key);
      shown.node.replaceWith((shown.node = cellNode(key, cell)));
      shown.step = cell.step;
    }
    if (change.crs && change.crs.set[route.key]) {
      $("crs-summary").replaceWith(crsSummary(model.crs.get(route.key)));
    }
    if (selected && cells.set[selected]) select(selected);
    return true;
  }

  // --- filters -------------------------------------------------------------------

  function namespaces() {
    const found = new Set();
    for (const crs of model.crs.values()) found.add(crs.namespace);
    for (const cluster of model.clusters.values()) found.add(cluster.namespace);
    const chosen = filters.namespace.value;
    const options = [el("option", null, "all")];
    options[0].value = "";
    for (const name of [...found].sort()) {
      const option = el("option", null, name);
      option.value = name;
      options.push(option);
    }
    filters.namespace.replaceChildren(...options);
    filters.namespace.value = found.has(chosen) ? chosen : "";
  }

  // "k=v, k!=v, k" as a list of tests on a cluster's labels.
  function labelTests() {
    const tests = [];
    for (const part of filters.label.value.split(",").map((p) => p.trim()).filter(Boolean)) {
      const negated = part.match(/^([^!=]+)!=(.*)$/);
      const equal = part.match(/^([^!=]+)==?(.*)$/);
      if (negated) tests.push((l) => l[negated[1].trim()] !== negated[2].trim());
      else if (equal) tests.push((l) => l[equal[1].trim()] === equal[2].trim());
      else tests.push((l) => Object.prototype.hasOwnProperty.call(l, part));
    }
    return tests;
  }

  let tests = [];

  function clusterPasses(namespace, name) {
    if (!tests.length) return true;
    const cluster = model.clusters.get(namespace + "/" + name);
    const labels = cluster ? cluster.labels : {};
    return tests.every((test) => test(labels));
  }

  function passes(cell) {
    const namespace = cell.crs.split("/")[0];
    if (filters.namespace.value && namespace !== filters.namespace.value) return false;
    if (filters.state.value && cell.state !== filters.state.value) return false;
    return clusterPasses(namespace, cell.cluster);
  }

  // --- routes --------------------------------------------------------------------

  function route() {
    const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    if (parts[0] === "crs" && parts.length === 3) return { view: "crs", key: parts[1] + "/" + parts[2] };
    if (parts[0] === "cluster" && parts.length === 3) {
      return { view: "cluster", namespace: parts[1], name: parts[2], key: parts[1] + "/" + parts[2] };
    }
    return { view: "fleet" };
  }

  function href(view, namespace, name) {
    return "#/" + view + "/" + encodeURIComponent(namespace) + "/" + encodeURIComponent(name);
  }

  function draw() {
    tests = labelTests();
    const now = route();
    drawn = { route: now, cells: new Map() };
    const where = $("where");
    const page = document.createDocumentFragment();
    if (now.view === "crs") {
      where.replaceChildren(link("#/", "all sets"), el("span", null, " › ClusterResourceSet " + now.key));
      drawCrs(page, now.key);
    } else if (now.view === "cluster") {
      where.replaceChildren(link("#/", "all sets"), el("span", null, " › Cluster " + now.key));
      drawCluster(page, now);
    } else {
      where.replaceChildren();
      drawFleet(page);
    }
    main.replaceChildren(page);
  }

  // --- the fleet: every CRS --------------------------------------------------------

  function countsList(counts) {
    const list = el("ul", "counts");
    for (const state of STATES) {
      if (!counts[state]) continue;
      const item = el("li", "s-" + state);
      item.append(el("span", "sym", SYMBOLS[state]), " " + state + " " + counts[state]);
      item.firstChild.setAttribute("aria-hidden", "true");
      list.append(item);
    }
    if (!list.childNodes.length) list.append(el("li", "empty", "no clusters"));
    return list;
  }

  function filteredCounts(key) {
    const counts = {};
    for (const cellKey of cellsOfCrs.get(key) || []) {
      const cell = model.cells.get(cellKey);
      if (!passes(cell)) continue;
      counts[cell.state] = (counts[cell.state] || 0) + 1;
    }
    return counts;
  }

  function stepText(crs) {
    if (crs.step === null || crs.step === undefined) return "-";
    return crs.steps ? crs.step + " of " + crs.steps : String(crs.step);
  }

  function drawFleet(page) {
    const rows = [...model.crs.values()]
      .filter((crs) => !filters.namespace.value || crs.namespace === filters.namespace.value)
      .map((crs) => [crs, filteredCounts(crs.key)])
      .filter(([, counts]) => !(filters.state.value || tests.length) || Object.keys(counts).length)
      .sort(([a], [b]) => a.key.localeCompare(b.key));
    const total = {};
    for (const [, counts] of rows) {
      for (const [state, n] of Object.entries(counts)) total[state] = (total[state] || 0) + n;
    }
    const head = el("div", "totals");
    head.append(el("h2", null, plural(rows.length, "ClusterResourceSet")), countsList(total));
    page.append(head);
    if (!rows.length) {
      page.append(el("p", "empty", "No ClusterResourceSet matches."));
      return;
    }
    const table = el("table", "fleet");
    const header = el("tr");
    for (const name of ["ClusterResourceSet", "Revision", "State", "Rollout", "Step", "Waiting for", "Held", "Clusters", "Message"]) {
      header.append(el("th", null, name));
    }
    table.append(el("thead"), el("tbody"));
    table.tHead.append(header);
    for (const [crs, counts] of rows) {
      const row = el("tr");
      const name = el("td");
      name.append(link(href("crs", crs.namespace, crs.name), crs.key));
      row.append(
        name,
        el("td", "revision", crs.revision || "-"),
        el("td", "state", crs.state),
        el("td", null, crs.phase || "-"),
        el("td", null, stepText(crs)),
        el("td", null, crs.waiting),
        el("td", null, crs.held === null || crs.held === undefined ? "-" : crs.held),
      );
      const countCell = el("td");
      countCell.append(countsList(counts));
      row.append(countCell, el("td", "message", crs.rolloutMessage || crs.message || ""));
      table.tBodies[0].append(row);
    }
    page.append(table);
  }

  // --- one CRS: its clusters by rollout step -----------------------------------------

  function crsSummary(crs) {
    const list = el("dl", "summary");
    list.id = "crs-summary";
    const add = (term, value) => {
      if (value === null || value === undefined || value === "") return;
      list.append(el("dt", null, term));
      const dd = el("dd");
      if (value instanceof Node) dd.append(value); else dd.textContent = String(value);
      list.append(dd);
    };
    add("Revision", crs.revision || "-");
    add("State", crs.state + (crs.reason && crs.reason !== crs.state ? " (" + crs.reason + ")" : ""));
    add("Rollout", crs.phase);
    add("Step", crs.phase ? stepText(crs) : null);
    add("Waiting for", crs.waiting !== "-" ? crs.waiting : null);
    add("Held clusters", crs.held);
    add("Message", crs.rolloutMessage || crs.message);
    add("Clusters", countsList(crs.counts));
    return list;
  }

  function cellNode(key, cell) {
    const item = el("li");
    const button = el("button", "cell s-" + cell.state);
    button.type = "button";
    button.dataset.key = key;
    button.setAttribute("aria-pressed", String(key === selected));
    const sym = el("span", "sym", SYMBOLS[cell.state] || "?");
    sym.setAttribute("aria-hidden", "true");
    const reason = cell.reason && cell.reason !== cell.state && cell.state !== "Ready" ? " · " + cell.reason : "";
    button.append(sym, el("span", "name", cell.cluster), el("span", "state", cell.state + reason));
    button.title = cell.cluster + ": " + cell.state + reason;
    item.append(button);
    return item;
  }

  function stepTitle(step, crs) {
    if (step === null) return "Clusters";
    if (step === 0) return "Holding updates (in no step)";
    if (step > crs.steps) return "Step " + step + " (matched by no step's selector)";
    return "Step " + step;
  }

  function drawCrs(page, key) {
    const crs = model.crs.get(key);
    if (!crs) {
      page.append(el("p", "empty", "ClusterResourceSet " + key + " is not there (deleted, or not in the namespaces served)."));
      return;
    }
    page.append(el("h2", null, "ClusterResourceSet " + key), crsSummary(crs));
    const groups = new Map();
    for (const cellKey of cellsOfCrs.get(key) || []) {
      const cell = model.cells.get(cellKey);
      if (!passes(cell)) continue;
      const step = cell.step === undefined ? null : cell.step;
      if (!groups.has(step)) groups.set(step, []);
      groups.get(step).push([cellKey, cell]);
    }
    if (!groups.size) page.append(el("p", "empty", "No cluster matches."));
    const order = [...groups.keys()].sort((a, b) => (a === 0 ? 1e9 : a) - (b === 0 ? 1e9 : b));
    for (const step of order) {
      const cells = groups.get(step).sort(([, a], [, b]) => a.cluster.localeCompare(b.cluster));
      const section = el("section", "step");
      const title = stepTitle(step, crs) + " · " + plural(cells.length, "cluster");
      const list = el("ul", "cells");
      list.setAttribute("aria-label", title);
      for (const [cellKey, cell] of cells) {
        const node = cellNode(cellKey, cell);
        drawn.cells.set(cellKey, { node, step: cell.step });
        list.append(node);
      }
      section.append(el("h2", null, title), list);
      page.append(section);
    }
  }

  // --- one cluster: every CRS on it ---------------------------------------------------

  function drawCluster(page, at) {
    const cluster = model.clusters.get(at.key);
    page.append(el("h2", null, "Cluster " + at.key));
    if (cluster) {
      const labels = Object.entries(cluster.labels).map(([k, v]) => k + "=" + v).join(", ");
      const facts = el("dl", "summary");
      facts.append(el("dt", null, "Labels"), el("dd", null, labels || "none"));
      if (cluster.paused) facts.append(el("dt", null, "Paused"), el("dd", null, "yes: the controller leaves it alone"));
      if (cluster.holdsUpdates) facts.append(el("dt", null, "Holds updates"), el("dd", null, "yes: it takes no new revision"));
      page.append(facts);
    } else {
      page.append(el("p", "empty", "No Cluster object by this name (bindings may remain)."));
    }
    const rows = [...(cellsOfCluster.get(at.key) || [])]
      .map((key) => [key, model.cells.get(key)])
      .filter(([, cell]) => !filters.state.value || cell.state === filters.state.value)
      .sort(([a], [b]) => a.localeCompare(b));
    if (!rows.length) {
      page.append(el("p", "empty", "No ClusterResourceSet selects this cluster."));
      return;
    }
    const table = el("table", "cluster");
    table.append(el("thead"), el("tbody"));
    const header = el("tr");
    for (const name of ["ClusterResourceSet", "State", "Reason", "Revision", "Current", "Last applied", "Message"]) {
      header.append(el("th", null, name));
    }
    table.tHead.append(header);
    for (const [, cell] of rows) {
      const [namespace, name] = cell.crs.split("/");
      const row = el("tr", "s-" + cell.state);
      const crs = el("td");
      crs.append(link(href("crs", namespace, name), cell.crs));
      const state = el("td", "state");
      const sym = el("span", "sym", SYMBOLS[cell.state]);
      sym.setAttribute("aria-hidden", "true");
      state.append(sym, " " + cell.state);
      row.append(
        crs, state,
        el("td", null, cell.reason || "-"),
        el("td", "revision", cell.revision || "-"),
        el("td", null, cell.current === null ? "-" : cell.current ? "yes" : "no"),
        el("td", null, cell.lastApplied || "-"),
        el("td", "message", cell.message || ""),
      );
      table.tBodies[0].append(row);
    }
    page.append(table);
  }

  // --- the selected cluster, with its binding's record ---------------------------------

  function select(key) {
    const cell = model.cells.get(key);
    const before = selected;
    selected = cell ? key : null;
    for (const k of [before, selected]) {
      const shown = k && drawn.cells.get(k);
      if (shown) shown.node.firstChild.setAttribute("aria-pressed", String(k === selected));
    }
    if (!cell) { detail.hidden = true; return; }
    const namespace = cell.crs.split("/")[0];
    const facts = el("dl", "summary");
    const add = (term, value) => {
      facts.append(el("dt", null, term));
      const dd = el("dd");
      if (value instanceof Node) dd.append(value); else dd.textContent = value === null || value === undefined ? "-" : String(value);
      facts.append(dd);
    };
    add("Cluster", link(href("cluster", namespace, cell.cluster), namespace + "/" + cell.cluster));
    add("ClusterResourceSet", cell.crs);
    add("State", (SYMBOLS[cell.state] || "") + " " + cell.state);
    add("Reason", cell.reason);
    add("Message", cell.message);
    add("Step", cell.step === 0 ? "none (holds updates)" : cell.step);
    add("Revision", (cell.revision || "-") + (cell.current === false ? " (not the CRS's)" : ""));
    add("Since", cell.since);
    add("Last applied", cell.lastApplied);
    const record = el("div", "record");
    record.append(el("p", "empty", "reading the binding…"));
    const close = el("button", null, "Close");
    close.type = "button";
    close.addEventListener("click", () => select(null));
    detail.replaceChildren(el("h2", null, cell.cluster), facts, el("h3", null, "Binding record"), record, close);
    detail.hidden = false;
    const query = new URLSearchParams({ namespace, cluster: cell.cluster, crs: cell.crs.split("/")[1] });
    fetch("/record?" + query)
      .then((answer) => (answer.ok ? answer.json() : null))
      .then((found) => {
        if (selected === key) record.replaceChildren(recordNode(found));
      })
      .catch(() => record.replaceChildren(el("p", "empty", "the binding could not be read")));
  }

  function recordNode(found) {
    if (!found) return el("p", "empty", "The binding records nothing for this set yet.");
    const box = el("div");
    const table = el("table");
    table.append(el("thead"), el("tbody"));
    const header = el("tr");
    for (const name of ["Resource", "Applied", "Hash", "Last applied", "Objects"]) header.append(el("th", null, name));
    table.tHead.append(header);
    for (const resource of found.resources || []) {
      const row = el("tr");
      row.append(
        el("td", null, resource.kind + "/" + resource.name),
        el("td", null, resource.applied ? "yes" : "no"),
        el("td", "revision", (resource.hash || "-").slice(0, 17)),
        el("td", null, resource.lastAppliedTime || "-"),
        el("td", null, (resource.objects || []).length),
      );
      table.tBodies[0].append(row);
    }
    box.append(table);
    const kept = found.deletionsSkipped || [];
    if (kept.length) box.append(el("p", null, "Kept, not deleted: " + kept.map((k) => k.kind + "/" + k.name).join(", ")));
    box.append(el("pre", null, JSON.stringify({ outcome: found.outcome, validation: found.validation }, null, 2)));
    return box;
  }

  // --- wiring ---------------------------------------------------------------------

  main.addEventListener("click", (event) => {
    const button = event.target.closest("button.cell");
    if (button) select(button.dataset.key);
  });
  for (const input of Object.values(filters)) input.addEventListener("input", () => draw());
  $("filters").addEventListener("submit", (event) => event.preventDefault());
  window.addEventListener("hashchange", () => { select(null); draw(); });

  const source = new EventSource("/events");
  source.addEventListener("snapshot", (event) => {
    const started = performance.now();
    const view = JSON.parse(event.data);
    stats.parseMs = performance.now() - started;
    snapshot(view);
    stats.drawMs = performance.now() - started - stats.parseMs;
    live.className = "";
    live.textContent = "live · " + plural(model.crs.size, "set") + ", " + plural(model.clusters.size, "cluster");
  });
  source.addEventListener("delta", (event) => delta(JSON.parse(event.data)));
  source.addEventListener("error", () => {
    live.className = "lost";
    live.textContent = "connection lost · reconnecting…";
  });
})();
