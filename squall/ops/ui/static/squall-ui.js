// Squall UI: the pages read Storm UI's REST API (/api/v1/...) and refresh themselves.
// Hand-written and dependency-free (no CDN: machines may have no internet).
"use strict";

const REFRESH_MS = 2000;
const CSRF = document.querySelector("meta[name=csrf-token]").content;
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const child of children) node.append(child instanceof Node ? child : String(child ?? ""));
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function say(text) {
  document.getElementById("message").textContent = text || "";
}

async function getJSON(url) {
  const response = await fetch(url, {credentials: "same-origin"});
  const body = await response.json();
  if (!response.ok) throw new Error(body.errorMessage || response.statusText);
  return body;
}

async function post(url, body) {
  const headers = {"X-CSRF-Token": CSRF};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, {method: "POST", credentials: "same-origin", headers,
                                     body: body === undefined ? undefined : JSON.stringify(body)});
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.errorMessage || response.statusText);
  return answer;
}

const COUNT = new Intl.NumberFormat("en");

// columns: [[title, key or function, text?, raw?]]; rows: objects; rowAttrs(row) -> attributes of
// the <tr>. Numbers are written as people read them (1,400,889), unless the column is raw (a port).
function table(columns, rows, rowAttrs = () => ({})) {
  const head = el("tr", {}, ...columns.map(([title, , text]) => el("th", text ? {class: "text"} : {}, title)));
  const body = rows.map(row => el("tr", rowAttrs(row), ...columns.map(([, key, text, raw]) => {
    const value = typeof key === "function" ? key(row) : row[key];
    return el("td", {class: (text ? "text " : "") + (typeof key === "string" ? key : "")},
              typeof value === "number" && !raw ? COUNT.format(value) : value);
  })));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, ...body));
}

function componentUrl(topology, component) {
  return `/component.html?id=${encodeURIComponent(topology)}&component=${encodeURIComponent(component)}`;
}

function fill(id, node) {
  const target = document.getElementById(id);
  target.replaceChildren(node);
}

// an age in its two largest units: "12s ago", "3m 5s ago", "2h 10m ago", "4d 1h ago"
function ago(secs) {
  if (secs === null || secs === undefined) return "";
  const parts = [[Math.floor(secs / 86400), "d"], [Math.floor(secs / 3600) % 24, "h"],
                 [Math.floor(secs / 60) % 60, "m"], [secs % 60, "s"]];
  const first = parts.findIndex(([n]) => n > 0);
  if (first < 0) return "just now";
  return parts.slice(first, first + 2).filter(([n], i) => i === 0 || n > 0).map(([n, unit]) => `${n}${unit}`)
    .join(" ") + " ago";
}

// -- the topology list ------------------------------------------------------------------------

async function refreshIndex() {
  try {
    const [cluster, summary] = await Promise.all([getJSON("/api/v1/cluster/summary"),
                                                  getJSON("/api/v1/topology/summary")]);
    fill("cluster", table([["Version", "stormVersion", true], ["Topologies", "topologies"],
                           ["Workers", "slotsUsed"], ["Executors", "executorsTotal"], ["Tasks", "tasksTotal"]],
                          [cluster]));
    const link = t => el("a", {href: `/topology.html?id=${encodeURIComponent(t.id)}`}, t.name);
    fill("topologies", table([["Name", link, true], ["Status", "status", true], ["Uptime", "uptime"],
                              ["Workers", "workersTotal"], ["Executors", "executorsTotal"], ["Tasks", "tasksTotal"]],
                             summary.topologies, t => ({"data-topology": t.id})));
    say("");
  } catch (error) {
    say(`Cannot read the API: ${error.message}`);
  }
}

// -- a topology --------------------------------------------------------------------------------

const params = new URLSearchParams(location.search);
const topologyId = params.get("id");
let msgTimeout = 30;

function capacityColour(capacity) {
  // Storm UI's idea: the nearer capacity is to 1, the more the component needs parallelism
  if (capacity >= 0.8) return "#e4574c";
  if (capacity >= 0.5) return "#f2c14e";
  return "#8fd19e";
}

// the box of `text` as drawn in `target` (an <svg> of the page): labels are sized to fit it
function textWidth(target, text) {
  const probe = svg("text", {x: 0, y: 0, visibility: "hidden"}, text);
  target.append(probe);
  const width = probe.getBBox().width;
  probe.remove();
  return width;
}

function overlaps(a, b) {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
}

function grow(box, by) {
  return {x: box.x - by, y: box.y - by, width: box.width + 2 * by, height: box.height + 2 * by};
}

// An edge's curve: {d, at(t)}. Edges between the same two components (a stateful topology's
// `$checkpoint` beside `default`) are bowed apart by `offset`, so that each keeps its own label.
function edgeCurve(a, b, W, H, offset, sign) {
  if (a === b) {  // a component reading itself: a loop over its box, one size per stream
    const h = 30 + Math.abs(offset) * 2;
    const x0 = a.x + W * 0.65, x1 = a.x + W * 0.35, y = a.y;
    const at = t => ({x: (1 - t) ** 2 * (1 + 2 * t) * x0 + t * t * (3 - 2 * t) * x1, y: y - 3 * (1 - t) * t * h});
    return {d: `M ${x0} ${y} C ${x0} ${y - h} ${x1} ${y - h} ${x1} ${y}`, at};
  }
  // leave by the side that faces the target, arrive by the side that faces the source
  let p0, p2;
  if (a.x !== b.x) {
    const forward = b.x > a.x;
    p0 = {x: forward ? a.x + W : a.x, y: a.y + H / 2};
    p2 = {x: forward ? b.x : b.x + W, y: b.y + H / 2};
  } else {
    const down = b.y > a.y;
    p0 = {x: a.x + W / 2, y: down ? a.y + H : a.y};
    p2 = {x: b.x + W / 2, y: down ? b.y : b.y + H};
  }
  const dx = p2.x - p0.x, dy = p2.y - p0.y, length = Math.hypot(dx, dy);
  // the normal of the group's first edge's direction (sign -1 for edges the other way), so
  // that A->B and B->A bow to different sides
  const nx = -dy / length * sign, ny = dx / length * sign;
  p0 = {x: p0.x + nx * offset * 0.4, y: p0.y + ny * offset * 0.4};
  p2 = {x: p2.x + nx * offset * 0.4, y: p2.y + ny * offset * 0.4};
  const c = {x: (p0.x + p2.x) / 2 + nx * offset * 2, y: (p0.y + p2.y) / 2 + ny * offset * 2};
  const at = t => ({x: (1 - t) ** 2 * p0.x + 2 * (1 - t) * t * c.x + t * t * p2.x,
                    y: (1 - t) ** 2 * p0.y + 2 * (1 - t) * t * c.y + t * t * p2.y});
  return {d: `M ${p0.x} ${p0.y} Q ${c.x} ${c.y} ${p2.x} ${p2.y}`, at};
}

function drawGraph(graph) {
  const target = document.getElementById("graph");
  target.replaceChildren();
  const ids = Object.keys(graph);
  const depth = {};
  const depthOf = (id, seen = new Set()) => {
    if (depth[id] !== undefined) return depth[id];
    if (seen.has(id)) return 0;  // a cycle: place it where it was met
    seen.add(id);
    const inputs = graph[id][":inputs"].filter(i => graph[i[":component"]] && i[":component"] !== id);
    depth[id] = inputs.length ? 1 + Math.max(...inputs.map(i => depthOf(i[":component"], seen))) : 0;
    return depth[id];
  };
  ids.forEach(id => depthOf(id));
  const edges = ids.flatMap(id => graph[id][":inputs"].filter(i => graph[i[":component"]]).map(i => (
    {from: i[":component"], to: id, stream: i[":stream"], grouping: i[":grouping"],
     label: `${i[":stream"]} · ${i[":grouping"]}`})));
  // boxes as wide as the longest id, columns apart by the longest edge label
  const W = Math.max(130, ...ids.map(id => textWidth(target, id) + 20)), H = 44, DY = 80, SPREAD = 20;
  const DX = W + Math.max(100, ...edges.map(e => textWidth(target, e.label) + 40));
  const groups = {};  // the edges between two components, either way
  for (const e of edges) (groups[[e.from, e.to].sort().join("\n")] ||= []).push(e);
  const loops = Object.values(groups).filter(g => g[0].from === g[0].to).map(g => g.length);
  const top = 20 + (loops.length ? 40 + SPREAD * Math.max(...loops) : 0);
  const columns = {};
  ids.forEach(id => (columns[depth[id]] = columns[depth[id]] || []).push(id));
  const pos = {};
  let rows = 1;
  for (const [d, members] of Object.entries(columns)) {
    members.forEach((id, i) => (pos[id] = {x: 20 + d * DX, y: top + i * DY}));
    rows = Math.max(rows, members.length);
  }
  const width = Math.max(40 + (Object.keys(columns).length - 1) * DX + W, 300), height = top + 20 + (rows - 1) * DY + H;
  target.setAttribute("width", width);
  target.setAttribute("height", height);
  target.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const marker = svg("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 6,
                                markerHeight: 6, orient: "auto-start-reverse"});
  marker.append(svg("path", {d: "M 0 0 L 10 5 L 0 10 z", fill: "#555"}));
  const defs = svg("defs");
  defs.append(marker);
  target.append(defs);
  // a label goes where it overlaps no box and no label placed before it: the middle of its
  // curve, else the first free point towards either end
  const taken = ids.map(id => grow({x: pos[id].x, y: pos[id].y, width: W, height: H}, 2));
  const spots = [0.5, 0.4, 0.6, 0.3, 0.7, 0.22, 0.78];
  for (const group of Object.values(groups)) {
    group.forEach((e, i) => {
      const offset = (i - (group.length - 1) / 2) * SPREAD;
      const curve = edgeCurve(pos[e.from], pos[e.to], W, H, e.from === e.to ? i * SPREAD / 2 : offset,
                              e.from === group[0].from ? 1 : -1);
      const g = svg("g", {"data-edge": `${e.from}->${e.to}`, "data-stream": e.stream, "data-grouping": e.grouping});
      const box = svg("rect", {class: "label-box", rx: 3});
      const text = svg("text", {"text-anchor": "middle", "dominant-baseline": "central"}, e.label);
      g.append(svg("path", {d: curve.d, fill: "none", stroke: "#555", "marker-end": "url(#arrow)"}), box, text);
      target.append(g);
      let placed;
      for (const t of spots) {
        const p = curve.at(t);
        text.setAttribute("x", p.x);
        text.setAttribute("y", p.y);
        placed = grow(text.getBBox(), 2);
        if (!taken.some(other => overlaps(placed, other))) break;
      }
      taken.push(placed);
      for (const [k, v] of Object.entries(placed)) box.setAttribute(k, v);
    });
  }
  for (const id of ids) {
    const node = graph[id], p = pos[id];
    const spout = node[":type"] === "spout";
    const g = svg("g", {"data-component": id});
    const link = svg("a", {href: componentUrl(topologyId, id)});
    link.append(svg("rect", {x: p.x, y: p.y, width: W, height: H, rx: spout ? 18 : 4,
                             fill: spout ? "#9cc3ef" : capacityColour(node[":capacity"]), stroke: "#333"}));
    link.append(svg("text", {x: p.x + W / 2, y: p.y + 18, "text-anchor": "middle"}, id));
    link.append(svg("text", {x: p.x + W / 2, y: p.y + 34, "text-anchor": "middle"},
                    spout ? `${node[":latency"].toFixed(2)} ms` : `capacity ${node[":capacity"].toFixed(3)}`));
    g.append(link);
    target.append(g);
  }
}

const NUMBER = new Intl.NumberFormat("en", {maximumSignificantDigits: 3, useGrouping: false});

// an axis number as people write it: 0.25, 480, 21.6k, 1.2M
function human(value) {
  const size = Math.abs(value);
  const [scale, suffix] = size >= 1e9 ? [1e9, "G"] : size >= 1e6 ? [1e6, "M"] : size >= 1e3 ? [1e3, "k"] : [1, ""];
  return NUMBER.format(value / scale) + suffix;
}

// 0 and up to five round steps (1, 2, 2.5 or 5 times a power of ten) up to at least `max` (> 0)
function roundTicks(max) {
  const raw = max / 5, power = 10 ** Math.floor(Math.log10(raw)), f = raw / power;
  const step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * power;
  return Array.from({length: Math.ceil(max / step - 1e-9) + 1}, (_, i) => i * step);
}

// seconds before now as a tick label: "-45s", "-2m", "-1m 30s"
function before(secs) {
  const m = Math.floor(secs / 60), s = Math.round(secs % 60);
  return secs ? `-${m ? `${m}m` : ""}${m && s ? " " : ""}${s ? `${s}s` : ""}` : "now";
}

const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];

// one line per series: [{name, points: [[t, value]]}]; t in seconds before now (<= 0). The
// legend is the figure's caption, under the plot, so that it never hides a line.
function lineChart(id, title, series, unit) {
  const target = document.getElementById(id);
  const W = +target.getAttribute("width"), H = +target.getAttribute("height");
  const left = 48, right = 14, top = 22, bottom = 22;
  const all = series.flatMap(s => s.points);
  const tMin = Math.min(-60, ...all.map(p => p[0]));
  const yTicks = roundTicks(Math.max(0, ...all.map(p => p[1])) || 1);
  const vMax = yTicks[yTicks.length - 1];
  const x = t => left + (t - tMin) / (0 - tMin) * (W - left - right);
  const y = v => H - bottom - v / vMax * (H - top - bottom);
  const tStep = [10, 15, 30, 60, 120, 300, 600].find(s => -tMin / s <= 5) || 600;
  const nodes = [svg("text", {x: left, y: 14}, `${title} (${unit})`),
                 svg("rect", {class: "plot-area", x: left, y: top, width: W - left - right, height: H - top - bottom,
                              fill: "none", stroke: "#999"})];
  for (const v of yTicks) {
    nodes.push(svg("line", {class: "grid", x1: left, y1: y(v), x2: W - right, y2: y(v)}),
               svg("text", {class: "y-tick", x: left - 4, y: y(v) + 4, "text-anchor": "end"}, human(v)));
  }
  for (let t = 0; t >= tMin; t -= tStep) {
    // the first tick at the left edge starts there, clear of the y axis' labels
    const anchor = !t ? "end" : x(t) - left < 20 ? "start" : "middle";
    nodes.push(svg("text", {class: "x-tick", x: x(t), y: H - 6, "text-anchor": anchor}, before(-t)));
  }
  const legend = [];
  series.forEach((s, i) => {
    if (!s.points.length) return;
    const colour = COLOURS[i % COLOURS.length];
    nodes.push(svg("polyline", {fill: "none", stroke: colour, "stroke-width": 1.5, "data-series": s.name,
                                points: s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ")}));
    legend.push(el("span", {"data-series": s.name}, el("i", {style: `background: ${colour}`}), s.name));
  });
  target.replaceChildren(...nodes);
  target.parentElement.querySelector(".legend").replaceChildren(...legend);
}

function drawPlots(points, page) {
  const bolts = page.bolts.map(b => b.boltId);
  lineChart("plot-throughput", "Spouts' throughput", [{name: "emitted", points: points.map(p => [p.t, p.emitted])},
                                                       {name: "acked", points: points.map(p => [p.t, p.acked])}],
            "tuples/s");
  lineChart("plot-latency", "Complete latency", [{name: "complete", points: points.map(p => [p.t, p.completeLatency])}],
            "ms");
  lineChart("plot-capacity", "Capacity",
            bolts.map(b => ({name: b, points: points.filter(p => p.components[b])
                                                  .map(p => [p.t, p.components[b].capacity])})),
            "0..1");
}

function drawTopology(page) {
  document.getElementById("name").textContent = page.name;
  const status = document.getElementById("status");
  status.textContent = page.status;
  status.className = `status ${page.status}`;
  document.getElementById("uptime").textContent = page.uptime;
  msgTimeout = page.msgTimeout;
  fill("topology-stats", table([["Window", "windowPretty", true], ["Emitted", "emitted"], ["Transferred", "transferred"],
                                ["Complete latency (ms)", "completeLatency"], ["Acked", "acked"], ["Failed", "failed"]],
                               page.topologyStats));
  const since = document.getElementById("current-run");
  since.hidden = !page.currentRun.length;
  since.textContent = "Since the last worker restart or rebalance: " + page.currentRun.map(
    c => `${c.component} emitted ${c.emitted}, acked ${c.acked}, failed ${c.failed}`).join("; ");
  const error = c => c.lastError
    ? el("span", {title: c.lastError}, `${c.lastErrorHeadline} (${ago(c.errorLapsedSecs)})`) : "";
  const anchor = id => el("a", {id: `component-${id}`, href: componentUrl(page.id, id)}, id);
  fill("spouts", table([["Id", s => anchor(s.spoutId), true], ["Executors", "executors"], ["Tasks", "tasks"],
                        ["Emitted", "emitted"], ["Transferred", "transferred"],
                        ["Complete latency (ms)", "completeLatency"], ["Acked", "acked"], ["Failed", "failed"],
                        ["Last error", error, true]],
                       page.spouts, s => ({"data-component": s.spoutId})));
  fill("bolts", table([["Id", b => anchor(b.boltId), true], ["Runs", b => b.operations || "", true],
                       ["Executors", "executors"], ["Tasks", "tasks"],
                       ["Emitted", "emitted"], ["Transferred", "transferred"], ["Capacity", "capacity"],
                       ["Execute latency (ms)", "executeLatency"], ["Executed", "executed"],
                       ["Process latency (ms)", "processLatency"], ["Acked", "acked"], ["Failed", "failed"],
                       ["Last error", error, true]],
                      page.bolts, b => ({"data-component": b.boltId})));
  document.getElementById("autoscale-section").hidden = page.autoscale === null;
  if (page.autoscale !== null) {
    fill("autoscale", page.autoscale.length
      ? table([["When", d => el("span", {title: new Date(d.time).toLocaleString()}, new Date(d.time).toLocaleTimeString()), true],
               ["Decision", "action", true], ["Workers", "workers"],
               ["Executors", d => Object.entries(d.executors).map(([c, n]) => `${c}: ${n}`).join(", "), true],
               ["Why", "reason", true]],
              page.autoscale, d => ({"data-action": d.action}))
      : el("p", {}, "No decision yet: it watches the topology and acts when a signal holds for its window."));
  }
  // each error once, with its count: the exception in sight, the traceback a click away
  fill("errors", page.lastErrors.length
    ? table([["Component", "component", true], ["Count", "count"], ["Last task", "task", false, true],
             ["Where", e => `${e.errorHost}:${e.errorPort}`, true],
             ["Last seen", e => el("span", {title: new Date(e.errorTime).toLocaleString()}, ago(e.errorLapsedSecs)),
              true],
             ["Error", e => el("details", {class: "error-text"}, el("summary", {}, e.headline), e.error), true]],
            page.lastErrors, e => ({"data-error-component": e.component}))
    : el("p", {}, "None."));
  const stacksButton = w => el("button", {class: "stacks", "data-port": w.port,
                                          ...(CSRF === "" ? {disabled: ""} : {})}, "Stacks");
  fill("workers", table([["Host", "host", true], ["Port", "port", false, true], ["Pid", "pid", false, true],
                         ["Executors", "executorsTotal"],
                         ["Tasks per component", w => Object.entries(w.componentNumTasks).map(([c, n]) => `${c}: ${n}`).join(", "), true],
                         ["Python stacks", stacksButton, true]],
                        page.workers, w => ({"data-worker": `${w.host}:${w.port}`})));
  for (const button of document.querySelectorAll("button.stacks")) {
    button.onclick = () => showStacks(`${page.workers.find(w => String(w.port) === button.dataset.port).host}:${button.dataset.port}`);
  }
  fill("configuration", table([["Key", "key", true], ["Value", r => JSON.stringify(r.value), true],
                               ["Doc", r => el("span", {class: "doc"}, r.doc), true]],
                              page.configurationDocs, r => (r.changed ? {class: "changed"} : {})));
}

// Storm UI's JStack, in Python: every thread's stack of one worker process, taken on request
async function showStacks(hostPort) {
  const target = document.getElementById("stacks");
  try {
    const answer = await post(`/api/v1/topology/${encodeURIComponent(topologyId)}/profiling/dumpstacks/${encodeURIComponent(hostPort)}`);
    target.replaceChildren(el("h3", {}, `Python stacks of worker ${hostPort}`), el("pre", {class: "stacks"}, answer.stacks));
  } catch (error) {
    say(`stacks refused: ${error.message}`);
  }
}

// refreshes asked for, and the latest drawn: one answering after a later one (the old `sys`
// after a click on its box) draws nothing
let requested = 0, drawn = 0;

async function refreshTopology() {
  const ticket = ++requested;
  const base = `/api/v1/topology/${encodeURIComponent(topologyId)}`;
  const win = document.getElementById("window").value, sys = document.getElementById("sys").checked;
  try {
    const [page, graph, series] = await Promise.all([getJSON(`${base}?window=${encodeURIComponent(win)}&sys=${sys}`),
                                                     getJSON(`${base}/visualization?window=${encodeURIComponent(win)}`),
                                                     getJSON(`${base}/series`)]);
    if (ticket < drawn) return;
    drawn = ticket;
    drawTopology(page);
    drawGraph(graph);
    drawPlots(series.points, page);
    say("");
  } catch (error) {
    say(`Cannot read topology ${topologyId}: ${error.message}`);
  }
}

async function act(operation, question) {
  if (!confirm(question)) return;
  try {
    await post(`/api/v1/topology/${encodeURIComponent(topologyId)}/${operation}`);
    say(`${operation}: done`);
  } catch (error) {
    say(`${operation} refused: ${error.message}`);
  }
  refreshTopology();
}

function startTopologyPage() {
  // the server writes the CSRF token into the page only when the browser's cookie holds this
  // UI's token: without it the page can read, and the controls would only be refused
  const signedIn = CSRF !== "";
  for (const button of document.querySelectorAll("button.control")) button.disabled = !signedIn;
  document.getElementById("token-note").hidden = signedIn;
  const sys = document.getElementById("sys");
  sys.checked = params.get("sys") === "true";
  sys.onchange = () => {  // kept in the address, so that a reload or a shared link shows the same
    params.set("sys", sys.checked);
    history.replaceState(null, "", `?${params}`);
    refreshTopology();
  };
  document.getElementById("activate").onclick = () => act("activate", `Activate topology ${topologyId}?`);
  document.getElementById("deactivate").onclick = () => act("deactivate", `Deactivate topology ${topologyId}?`);
  document.getElementById("kill").onclick = () => {
    const wait = prompt(`Kill topology ${topologyId}? Seconds to wait after deactivating its spouts:`, msgTimeout);
    if (wait === null) return;
    post(`/api/v1/topology/${encodeURIComponent(topologyId)}/kill/${encodeURIComponent(wait)}`)
      .then(() => say(`kill: ${topologyId} is being killed`), error => say(`kill refused: ${error.message}`));
  };
  document.getElementById("rebalance").onclick = () => {
    // Storm UI's dialog, as prompts: workers, then executors per component ("split=4 count=2")
    const workers = prompt(`Rebalance topology ${topologyId}: number of workers (empty: unchanged)`, "");
    if (workers === null) return;
    const executors = prompt("Executors per component, e.g. \"split=4 count=2\" (empty: unchanged)", "");
    if (executors === null) return;
    const wait = prompt("Seconds to wait after deactivating its spouts:", msgTimeout);
    if (wait === null) return;
    const options = {};
    if (workers.trim()) options.numWorkers = workers.trim();
    const pairs = executors.split(/[\s,]+/).filter(Boolean).map(p => p.split("="));
    if (pairs.length) options.executors = Object.fromEntries(pairs);
    post(`/api/v1/topology/${encodeURIComponent(topologyId)}/rebalance/${encodeURIComponent(wait)}`,
         {rebalanceOptions: options})
      .then(() => say(`rebalance: ${topologyId} is being rebalanced`), error => say(`rebalance refused: ${error.message}`));
  };
  document.getElementById("window").onchange = refreshTopology;
  refreshTopology();
  setInterval(refreshTopology, REFRESH_MS);
}

// -- a component (Storm UI's component.html) ----------------------------------------------------

const componentId = params.get("component");

function drawComponent(page) {
  const spout = page.componentType === "spout";
  document.title = `Squall UI: ${page.id}`;
  document.getElementById("type").textContent = spout ? "Spout" : "Bolt";
  document.getElementById("name").textContent = page.id;
  const status = document.getElementById("status");
  status.textContent = page.topologyStatus;
  status.className = `status ${page.topologyStatus}`;
  const link = document.getElementById("topology-link");
  link.textContent = `Topology ${page.topologyId}`;
  link.href = `/topology.html?id=${encodeURIComponent(page.topologyId)}`;
  const summary = [["Id", "id", true], ["Topology", "name", true], ["Executors", "executors"], ["Tasks", "tasks"]];
  if (page.operations) summary.push(["Runs", "operations", true]);
  fill("summary", table(summary, [page]));
  const latencies = spout ? [["Complete latency (ms)", "completeLatency"]]
    : [["Execute latency (ms)", "executeLatency"], ["Executed", "executed"], ["Process latency (ms)", "processLatency"]];
  fill("stats", table([["Window", "windowPretty", true], ["Emitted", "emitted"], ["Transferred", "transferred"],
                       ...latencies, ["Acked", "acked"], ["Failed", "failed"]],
                      spout ? page.spoutSummary : page.boltStats));
  document.getElementById("inputs-section").hidden = spout;
  if (!spout) {
    fill("inputs", table([["Component", i => el("a", {href: componentUrl(page.topologyId, i.component)}, i.component), true],
                          ["Stream", "stream", true], ["Grouping", "grouping", true],
                          ["Execute latency (ms)", i => i.executeLatency ?? "", false],
                          ["Executed", i => i.executed ?? ""], ["Process latency (ms)", i => i.processLatency ?? ""],
                          ["Acked", i => i.acked ?? ""], ["Failed", i => i.failed ?? ""]],
                         page.inputStats, i => ({"data-input": `${i.component}:${i.stream}`})));
  }
  fill("outputs", table([["Stream", "stream", true], ["Emitted", "emitted"], ["Transferred", "transferred"]],
                        page.outputStats, o => ({"data-stream": o.stream})));
  const where = e => `${e.host}:${e.port}`;
  const figures = spout ? [["Complete latency (ms)", "completeLatency"]]
    : [["Capacity", "capacity"], ["Execute latency (ms)", "executeLatency"], ["Executed", "executed"],
       ["Process latency (ms)", "processLatency"]];
  fill("executors", table([["Id", "id", true], ["Uptime", "uptime"], ["Host:port", where, true],
                           ["Emitted", "emitted"], ["Transferred", "transferred"], ...figures,
                           ["Acked", "acked"], ["Failed", "failed"]],
                          page.executorStats, e => ({"data-executor": e.id})));
  fill("errors", page.componentErrors.length
    ? table([["Time", e => el("span", {title: new Date(e.errorTime).toLocaleString()}, ago(e.errorLapsedSecs)), true],
             ["Task", "task", false, true], ["Where", e => `${e.errorHost}:${e.errorPort}`, true], ["Count", "count"],
             ["Error", e => el("details", {class: "error-text"}, el("summary", {}, e.headline), e.error), true]],
            page.componentErrors)
    : el("p", {}, "None."));
  const metrics = Object.entries(page.userMetrics || {});
  fill("metrics", metrics.length
    ? table([["Metric", ([name]) => name, true], ["Value", ([, value]) => typeof value === "number" ? value : JSON.stringify(value), true]],
            metrics)
    : el("p", {}, "None (a component registers its own with context.register_metric)."));
  document.getElementById("sampling").textContent = page.samplingPct
    ? `sampling ${page.samplingPct}% for ${Math.ceil(page.samplingSecsLeft)} more s` : "off";
}

function drawComponentPlots(points, page) {
  const mine = points.filter(p => p.components[page.id]).map(p => [p.t, p.components[page.id]]);
  const spout = page.componentType === "spout";
  lineChart("plot-throughput", `${page.id}'s throughput`,
            [{name: "emitted", points: mine.map(([t, c]) => [t, c.emitted])},
             {name: spout ? "acked" : "executed", points: mine.map(([t, c]) => [t, spout ? c.acked : c.executed])}],
            "tuples/s");
  if (spout) {
    lineChart("plot-capacity", "Complete latency", [{name: "complete", points: mine.map(([t, c]) => [t, c.latency])}], "ms");
  } else {
    lineChart("plot-capacity", "Capacity", [{name: "capacity", points: mine.map(([t, c]) => [t, c.capacity])}], "0..1");
  }
}

const SAMPLES_SHOWN = 200;  // the newest; the API has up to a thousand

function drawSamples(samples) {
  fill("samples", samples.length
    ? table([["Time", s => new Date(s.time * 1000).toLocaleTimeString(), true], ["Stream", "stream", true],
             ["Task", "task", false, true], ["Values", s => JSON.stringify(s.values), true]],
            samples.slice(-SAMPLES_SHOWN).reverse(), () => ({class: "sample"}))
    : el("p", {}, "No tuple sampled."));
}

let componentTicket = 0, componentDrawn = 0;

async function refreshComponent() {
  const ticket = ++componentTicket;
  const base = `/api/v1/topology/${encodeURIComponent(topologyId)}`;
  const win = document.getElementById("window").value;
  try {
    const [page, series] = await Promise.all([
      getJSON(`${base}/component/${encodeURIComponent(componentId)}?window=${encodeURIComponent(win)}`),
      getJSON(`${base}/series`)]);
    if (ticket < componentDrawn) return;
    componentDrawn = ticket;
    drawComponent(page);
    drawComponentPlots(series.points, page);
    if (CSRF !== "") drawSamples((await getJSON(`${base}/component/${encodeURIComponent(componentId)}/samples`)).samples);
    say("");
  } catch (error) {
    say(`Cannot read component ${componentId} of ${topologyId}: ${error.message}`);
  }
}

function startComponentPage() {
  const signedIn = CSRF !== "";
  for (const button of document.querySelectorAll("button.control")) button.disabled = !signedIn;
  document.getElementById("token-note").hidden = signedIn;
  const debug = action => {
    const pct = action === "enable" ? document.getElementById("sample-pct").value : "0";
    const secs = document.getElementById("sample-secs").value;
    post(`/api/v1/topology/${encodeURIComponent(topologyId)}/component/${encodeURIComponent(componentId)}/debug/${action}/${encodeURIComponent(pct)}?secs=${encodeURIComponent(secs)}`)
      .then(() => { say(""); refreshComponent(); }, error => say(`sampling refused: ${error.message}`));
  };
  document.getElementById("sample-start").onclick = () => debug("enable");
  document.getElementById("sample-stop").onclick = () => debug("disable");
  document.getElementById("window").onchange = refreshComponent;
  refreshComponent();
  setInterval(refreshComponent, REFRESH_MS);
}

if (document.body.dataset.page === "topology") {
  startTopologyPage();
} else if (document.body.dataset.page === "component") {
  startComponentPage();
} else {
  refreshIndex();
  setInterval(refreshIndex, REFRESH_MS * 2);
}
