// The aluad dashboard: polls the management API and renders the Recovery
// Guru, the ownership map, the connectivity matrix, per-port latency and
// the paths. A token given as #token=... in the URL is sent as a bearer
// token (needed when the API listens beyond loopback).
"use strict";

const token = new URLSearchParams(location.hash.slice(1)).get("token");
const colors = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#db2777", "#0891b2", "#65a30d"];

async function get(path) {
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const r = await fetch(path, { headers, cache: "no-store" });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids.flat()) {
    if (k === null || k === undefined) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function table(head, rows) {
  return el("table", {}, el("thead", {}, el("tr", {}, head.map(h => el("th", {}, h)))),
    el("tbody", {}, rows));
}

function summaryOf(r) {
  const who = [];
  if (r.host) who.push("host " + r.host);
  if (r.node) who.push("node " + r.node);
  if (!r.host && r.luns && r.luns.length === 1) who.push("LUN " + r.luns[0]);
  return who.length ? r.title + ": " + who.join(", ") : r.title;
}

// iso is a time as ISO 8601 in UTC, to the second (as the CLI prints it).
function iso(t) {
  return new Date(t).toISOString().replace(/\.\d+Z$/, "Z");
}

function ago(t) {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(t)) / 1000));
  return s < 120 ? s + " s ago" : Math.round(s / 60) + " min ago";
}

function renderGuru(reports, err) {
  const body = document.getElementById("guru-body");
  body.replaceChildren();
  if (err) {
    body.append(el("p", { class: "muted" }, "No reports: " + err));
    return;
  }
  if (reports.length === 0) {
    body.append(el("p", { class: "ok", id: "no-problems" },
      "No problems: every host has redundant paths and every LUN is where it should be."));
    return;
  }
  for (const r of reports) {
    const details = el("dl", {});
    const add = (k, v) => details.append(el("dt", {}, k), el("dd", {}, v));
    if (r.host) add("Host", r.host);
    if (r.node) add("Node", r.node);
    if (r.ports && r.ports.length) add("Ports", r.ports.join(", "));
    if (r.luns && r.luns.length) add("LUNs", r.luns.join(", "));
    const since = r.since && !r.since.startsWith("0001");
    if (since) add("Since", iso(r.since) + " (" + ago(r.since) + ")");
    // One line per report; it opens to the details and the procedure.
    const key = r.condition + "|" + (r.host || "") + "|" + (r.node || "") + "|" + (r.luns || []).join(",");
    const d = el("details", { class: "problem " + r.severity, "data-condition": r.condition, "data-host": r.host || "",
        "data-node": r.node || "", "data-ports": (r.ports || []).join(","), "data-key": key },
      el("summary", {}, el("span", { class: "sev " + r.severity }, r.severity + " · " + r.code), " ", summaryOf(r),
        since ? el("span", { class: "muted when" }, " since " + iso(r.since)) : null),
      el("h4", {}, "Details"), details,
      el("h4", {}, "What caused the problem"), el("p", {}, r.cause), el("p", { class: "muted" }, r.meaning),
      el("h4", {}, "Recovery procedure"), el("ol", {}, r.procedure.map(s => el("li", {}, s))));
    if (opened.has(key)) d.open = true;
    d.addEventListener("toggle", () => { if (d.open) opened.add(key); else opened.delete(key); });
    body.append(d);
  }
}

// opened: the reports an operator opened, kept open across refreshes.
const opened = new Set();

function renderOwnership(luns) {
  const nodes = luns.length ? luns[0].groups.map(g => g.node) : [];
  const rows = luns.map(l => el("tr", { "data-lun": l.id },
    el("td", {}, l.id),
    nodes.map(n => {
      const g = l.groups.find(x => x.node === n);
      const label = (n === l.owner ? "" : "") + g.state + (n === l.preferred ? " ★" : "");
      const td = el("td", { class: "st-" + g.state }, n === l.owner ? el("b", {}, label) : label);
      return td;
    }),
    el("td", {}, l.moving ? "moving" : "")));
  document.getElementById("ownership-body").replaceChildren(
    table(["LUN", ...nodes.map(n => "node " + n), ""], rows));
}

function renderConnectivity(c) {
  const rows = c.hosts.map(h => el("tr", {},
    el("td", { class: "iqn" }, h.host, h.declared ? "" : el("span", { class: "sev" }, "unknown initiator")),
    el("td", {}, h.type),
    h.cells.map(s => el("td", { class: "c-" + s }, s))));
  document.getElementById("connectivity-body").replaceChildren(
    rows.length ? table(["Host", "Type", ...c.nodes.map(n => "node " + n)], rows)
      : el("p", { class: "muted" }, "No host has logged in."));
}

function renderLatency(ports) {
  const W = 900, H = 220, L = 60, B = 24;
  let tmin = Infinity, tmax = -Infinity, ymax = 0;
  for (const p of ports) for (const s of p.samples) {
    const t = Date.parse(s.time);
    tmin = Math.min(tmin, t); tmax = Math.max(tmax, t); ymax = Math.max(ymax, s.mean_us);
  }
  const body = document.getElementById("latency-body");
  if (!isFinite(tmin) || ymax === 0) {
    body.replaceChildren(el("p", { class: "muted" }, "No I/O yet."));
    return;
  }
  ymax *= 1.1;
  const x = t => L + (tmax === tmin ? 0 : (t - tmin) / (tmax - tmin)) * (W - L - 10);
  const y = v => (H - B) - v / ymax * (H - B - 10);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H + 20}`);
  svg.setAttribute("width", "100%");
  const line = (x1, y1, x2, y2, c) => {
    const l = document.createElementNS(ns, "line");
    for (const [k, v] of Object.entries({ x1, y1, x2, y2, stroke: c })) l.setAttribute(k, v);
    svg.append(l);
  };
  const text = (tx, ty, s, anchor) => {
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", tx); t.setAttribute("y", ty); t.setAttribute("text-anchor", anchor || "start");
    t.textContent = s; svg.append(t);
  };
  line(L, H - B, W - 10, H - B, "#9ca3af");
  line(L, 10, L, H - B, "#9ca3af");
  for (let i = 0; i <= 4; i++) {
    const v = ymax * i / 4;
    text(L - 4, y(v) + 4, v >= 1000 ? (v / 1000).toFixed(1) + " ms" : Math.round(v) + " µs", "end");
  }
  text(L, H - 6, iso(tmin));
  text(W - 10, H - 6, iso(tmax), "end");
  ports.forEach((p, i) => {
    const pts = p.samples.filter(s => s.mean_us > 0).map(s => x(Date.parse(s.time)) + "," + y(s.mean_us));
    const c = colors[i % colors.length];
    if (pts.length) {
      const pl = document.createElementNS(ns, "polyline");
      pl.setAttribute("points", pts.join(" "));
      pl.setAttribute("fill", "none"); pl.setAttribute("stroke", c); pl.setAttribute("stroke-width", "1.5");
      pl.setAttribute("data-port", p.port);
      svg.append(pl);
    }
    const lx = L + 10 + i * 90;
    line(lx, H + 12, lx + 16, H + 12, c);
    text(lx + 20, H + 16, p.node + "/" + p.port);
  });
  body.replaceChildren(svg);
}

function renderPaths(paths) {
  const rows = paths.map(p => el("tr", { "data-port": p.port, "data-state": p.state, class: p.state === "failed" ? "failed" : "" },
    el("td", {}, p.host), el("td", { class: "iqn" }, p.initiator), el("td", {}, p.node + "/" + p.port),
    el("td", { class: "state" }, p.state === "failed" ? "FAILED " + iso(p.since) + " (" + p.reason + ")" : "up"),
    el("td", { class: "num" }, p.commands), el("td", { class: "num" }, p.mbps.toFixed(2)),
    el("td", { class: "num" }, p.latency_us.toFixed(0)),
    el("td", { class: p.degraded ? "degraded" : "" }, p.expansion ? p.expansion.toFixed(1) + (p.degraded ? " degraded" : "") : "–"),
    el("td", { class: "luns" }, p.state === "failed" ? "no session" :
      p.luns.map(l => el("span", { class: "lun st-" + l.state }, `L${l.lun} ${l.in_use ? "INU" : "RDY"}/${l.state}`)))));
  document.getElementById("paths-body").replaceChildren(
    rows.length ? table(["Host", "Initiator", "Port", "State", "Cmds", "MB/s", "Latency µs", "Expansion", "LUNs (in use or ready / ALUA state)"], rows)
      : el("p", { class: "muted" }, "No sessions."));
}

// markLayout notes on each card whether its content is wider than the
// card (cut off, needing a scroll) and whether it starts below the first
// screen: what the layout must avoid, readable in the DOM.
function markLayout() {
  for (const c of document.querySelectorAll(".card")) {
    c.dataset.overflow = String(c.scrollWidth > c.clientWidth + 1);
    c.dataset.fold = String(c.getBoundingClientRect().top >= window.innerHeight);
  }
}

async function refresh() {
  const errBox = document.getElementById("error");
  try {
    const [st, luns, conn, lat, paths] = await Promise.all([get("/v1/status"), get("/v1/luns"),
      get("/v1/connectivity"), get("/v1/latency"), get("/v1/paths")]);
    let reports = [], rerr = null;
    try { reports = await get("/v1/reports"); } catch (e) { rerr = e.message; }
    document.getElementById("target").textContent = st.target + " · " + st.alua + " ALUA";
    const up = st.nodes.filter(n => n.up).length;
    document.getElementById("summary").replaceChildren(
      el("span", {}, `nodes ${up}/${st.nodes.length} up`), el("span", {}, `${st.luns} LUNs (${st.luns_off_preferred} off preferred)`),
      el("span", {}, `hosts: ${st.hosts} declared, ${st.unknown_initiators} unknown initiators`), el("span", {}, `${st.sessions} sessions`),
      el("span", {}, `problems: ${st.reports.critical || 0} critical, ${st.reports.major || 0} major, ${st.reports.minor || 0} minor`));
    renderGuru(reports, rerr);
    renderOwnership(luns);
    renderConnectivity(conn);
    renderLatency(lat);
    renderPaths(paths);
    markLayout();
    errBox.hidden = true;
    document.body.dataset.state = "ready";
  } catch (e) {
    errBox.textContent = "Cannot read the array: " + e.message;
    errBox.hidden = false;
    document.body.dataset.state = "error";
  }
}

refresh();
setInterval(refresh, 2000);
