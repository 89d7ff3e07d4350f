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

// columns: [[title, key or function, text?]]; rows: objects; rowAttrs(row) -> attributes of the <tr>
function table(columns, rows, rowAttrs = () => ({})) {
  const head = el("tr", {}, ...columns.map(([title, , text]) => el("th", text ? {class: "text"} : {}, title)));
  const body = rows.map(row => el("tr", rowAttrs(row), ...columns.map(([, key, text]) => {
    const value = typeof key === "function" ? key(row) : row[key];
    return el("td", {class: (text ? "text " : "") + (typeof key === "string" ? key : "")}, value);
  })));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, ...body));
}

function fill(id, node) {
  const target = document.getElementById(id);
  target.replaceChildren(node);
}

function ago(secs) {
  return secs === null || secs === undefined ? "" : `${secs}s ago`;
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

function drawGraph(graph) {
  const target = document.getElementById("graph");
  const ids = Object.keys(graph);
  const depth = {};
  const depthOf = (id, seen = new Set()) => {
    if (depth[id] !== undefined) return depth[id];
    if (seen.has(id)) return 0;  // a cycle: place it where it was met
    seen.add(id);
    const inputs = graph[id][":inputs"].filter(i => graph[i[":component"]]);
    depth[id] = inputs.length ? 1 + Math.max(...inputs.map(i => depthOf(i[":component"], seen))) : 0;
    return depth[id];
  };
  ids.forEach(id => depthOf(id));
  const columns = {};
  ids.forEach(id => (columns[depth[id]] = columns[depth[id]] || []).push(id));
  const pos = {};
  const W = 130, H = 44, DX = 230, DY = 80;
  let rows = 1;
  for (const [d, members] of Object.entries(columns)) {
    members.forEach((id, i) => (pos[id] = {x: 20 + d * DX, y: 20 + i * DY}));
    rows = Math.max(rows, members.length);
  }
  const width = 40 + (Object.keys(columns).length - 1) * DX + W, height = 40 + (rows - 1) * DY + H;
  target.setAttribute("width", Math.max(width, 300));
  target.setAttribute("height", height);
  target.setAttribute("viewBox", `0 0 ${Math.max(width, 300)} ${height}`);
  const marker = svg("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 6,
                                markerHeight: 6, orient: "auto-start-reverse"});
  marker.append(svg("path", {d: "M 0 0 L 10 5 L 0 10 z", fill: "#555"}));
  const defs = svg("defs");
  defs.append(marker);
  target.replaceChildren(defs);
  for (const id of ids) {
    for (const input of graph[id][":inputs"]) {
      const from = pos[input[":component"]], to = pos[id];
      if (!from) continue;
      const g = svg("g", {"data-edge": `${input[":component"]}->${id}`, "data-stream": input[":stream"],
                          "data-grouping": input[":grouping"]});
      const x1 = from.x + W, y1 = from.y + H / 2, x2 = to.x, y2 = to.y + H / 2;
      g.append(svg("line", {x1, y1, x2, y2, stroke: "#555", "marker-end": "url(#arrow)"}));
      g.append(svg("text", {x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 4, "text-anchor": "middle"},
                   `${input[":stream"]} · ${input[":grouping"]}`));
      target.append(g);
    }
  }
  for (const id of ids) {
    const node = graph[id], p = pos[id];
    const spout = node[":type"] === "spout";
    const g = svg("g", {"data-component": id});
    const link = svg("a", {href: `#component-${id}`});
    link.append(svg("rect", {x: p.x, y: p.y, width: W, height: H, rx: spout ? 18 : 4,
                             fill: spout ? "#9cc3ef" : capacityColour(node[":capacity"]), stroke: "#333"}));
    link.append(svg("text", {x: p.x + W / 2, y: p.y + 18, "text-anchor": "middle"}, id));
    link.append(svg("text", {x: p.x + W / 2, y: p.y + 34, "text-anchor": "middle"},
                    spout ? `${node[":latency"].toFixed(2)} ms` : `capacity ${node[":capacity"].toFixed(3)}`));
    g.append(link);
    target.append(g);
  }
}

// one line per series: [{name, points: [[t, value]]}]; t in seconds before now (<= 0)
function lineChart(id, title, series, unit) {
  const target = document.getElementById(id);
  const W = +target.getAttribute("width"), H = +target.getAttribute("height");
  const left = 62, right = 10, top = 20, bottom = 24;
  const all = series.flatMap(s => s.points);
  const tMin = Math.min(-60, ...all.map(p => p[0]));
  const vMax = Math.max(1e-9, ...all.map(p => p[1])) * 1.1;
  const x = t => left + (t - tMin) / (0 - tMin) * (W - left - right);
  const y = v => H - bottom - v / vMax * (H - top - bottom);
  const colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
  const nodes = [svg("text", {x: left, y: 14}, `${title} (${unit})`),
                 svg("line", {x1: left, y1: H - bottom, x2: W - right, y2: H - bottom, stroke: "#999"}),
                 svg("line", {x1: left, y1: top, x2: left, y2: H - bottom, stroke: "#999"}),
                 svg("text", {x: left - 4, y: top + 4, "text-anchor": "end"}, vMax.toPrecision(3)),
                 svg("text", {x: left - 4, y: H - bottom, "text-anchor": "end"}, "0"),
                 svg("text", {x: left, y: H - 6}, `${Math.round(tMin)}s`),
                 svg("text", {x: W - right, y: H - 6, "text-anchor": "end"}, "now")];
  series.forEach((s, i) => {
    if (!s.points.length) return;
    const colour = colours[i % colours.length];
    nodes.push(svg("polyline", {fill: "none", stroke: colour, "stroke-width": 1.5, "data-series": s.name,
                                points: s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ")}));
    nodes.push(svg("text", {x: W - right - 4, y: top + 12 * (i + 1), "text-anchor": "end", fill: colour}, s.name));
  });
  target.replaceChildren(...nodes);
}

function drawPlots(points, page) {
  const bolts = page.bolts.map(b => b.boltId);
  lineChart("plot-throughput", "Spouts' acked tuples/s", [{name: "acked", points: points.map(p => [p.t, p.acked])}],
            "tuples/s");
  lineChart("plot-latency", "Complete latency", [{name: "complete", points: points.map(p => [p.t, p.completeLatency])}],
            "ms");
  lineChart("plot-capacity", "Capacity", bolts.map(b => ({name: b, points: points.map(p => [p.t, p.components[b].capacity])})),
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
  // an error's message: the last unindented line of its traceback (the exception), not where it ran
  const message = text => text.trim().split("\n").filter(line => line && !/^\s/.test(line)).pop() || "";
  const error = c => c.lastError ? `${message(c.lastError)} (${ago(c.errorLapsedSecs)})` : "";
  const anchor = id => el("a", {id: `component-${id}`, href: `/api/v1/topology/${encodeURIComponent(page.id)}/component/${encodeURIComponent(id)}`}, id);
  fill("spouts", table([["Id", s => anchor(s.spoutId), true], ["Executors", "executors"], ["Tasks", "tasks"],
                        ["Emitted", "emitted"], ["Transferred", "transferred"],
                        ["Complete latency (ms)", "completeLatency"], ["Acked", "acked"], ["Failed", "failed"],
                        ["Last error", error, true]],
                       page.spouts, s => ({"data-component": s.spoutId})));
  fill("bolts", table([["Id", b => anchor(b.boltId), true], ["Executors", "executors"], ["Tasks", "tasks"],
                       ["Emitted", "emitted"], ["Transferred", "transferred"], ["Capacity", "capacity"],
                       ["Execute latency (ms)", "executeLatency"], ["Executed", "executed"],
                       ["Process latency (ms)", "processLatency"], ["Acked", "acked"], ["Failed", "failed"],
                       ["Last error", error, true]],
                      page.bolts, b => ({"data-component": b.boltId})));
  fill("errors", page.lastErrors.length
    ? table([["Component", "component", true], ["Task", "task"], ["Count", "count"],
             ["Where", e => `${e.errorHost}:${e.errorPort}`, true],
             ["When", e => new Date(e.errorTime).toLocaleString(), true],
             ["Error", e => el("div", {class: "error-text"}, e.error), true]], page.lastErrors)
    : el("p", {}, "None."));
  fill("workers", table([["Host", "host", true], ["Port", "port"], ["Pid", "pid"], ["Executors", "executorsTotal"],
                         ["Tasks per component", w => Object.entries(w.componentNumTasks).map(([c, n]) => `${c}: ${n}`).join(", "), true]],
                        page.workers));
  fill("configuration", table([["Key", "key", true], ["Value", r => JSON.stringify(r.value), true],
                               ["Doc", r => el("span", {class: "doc"}, r.doc), true]],
                              page.configurationDocs, r => (r.changed ? {class: "changed"} : {})));
}

async function refreshTopology() {
  const base = `/api/v1/topology/${encodeURIComponent(topologyId)}`;
  const win = document.getElementById("window").value;
  try {
    const [page, graph, series] = await Promise.all([getJSON(`${base}?window=${encodeURIComponent(win)}`),
                                                     getJSON(`${base}/visualization?window=${encodeURIComponent(win)}`),
                                                     getJSON(`${base}/series`)]);
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

if (document.body.dataset.page === "topology") {
  startTopologyPage();
} else {
  refreshIndex();
  setInterval(refreshIndex, REFRESH_MS * 2);
}
