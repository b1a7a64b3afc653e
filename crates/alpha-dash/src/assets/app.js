// Alpha dashboard. One script for the three pages (runs, run, systems): it polls the server's
// JSON API every 2 s and draws charts as SVG with the small renderer below, so the page needs
// no library and no network beyond this server.
"use strict";

const POLL_MS = 2000;
const SVGNS = "http://www.w3.org/2000/svg";
const COLORS = {
  loss: "#1f5fd6", band: "#1f5fd6", unseen: "#d9480f", held: "#b4235a", ref: "#8a94a3",
  a: "#1f5fd6", b: "#0f9d8a", c: "#d9480f", d: "#7c3aed", e: "#b4235a", f: "#8a94a3",
};

// ---------- formatting ----------
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const isNum = (x) => typeof x === "number" && isFinite(x);
function fmt(x, digits = 3) {
  if (!isNum(x)) return "—";
  const a = Math.abs(x);
  if (a !== 0 && (a >= 1e7 || a < 1e-3)) return x.toExponential(2);
  return x.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}
const int = (x) => (isNum(x) ? Math.round(x).toLocaleString("en-US") : "—");
// Seconds as the trainer's progress lines write them: 42.0 s, 9m 05s, 1h 02m.
function secs(s) {
  if (!isNum(s)) return "—";
  s = Math.max(s, 0);
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) { const w = Math.round(s); return `${Math.floor(w / 60)}m ${String(w % 60).padStart(2, "0")}s`; }
  const m = Math.round(s / 60);
  return `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, "0")}m`;
}
function sig(x, n = 3) {
  if (!isNum(x)) return "—";
  if (x === 0) return "0";
  const a = Math.abs(x);
  if (a >= 1e6 || a < 1e-3) return x.toExponential(2);
  const d = Math.max(0, n - 1 - Math.floor(Math.log10(a)));
  return x.toLocaleString("en-US", { minimumFractionDigits: Math.min(d, 6), maximumFractionDigits: Math.min(d, 6) });
}
// A legend or tooltip value: four significant digits, no trailing zeros.
function short(x) {
  if (!isNum(x)) return "—";
  const a = Math.abs(x);
  if (a !== 0 && (a >= 1e7 || a < 1e-3)) return x.toExponential(2);
  if (a >= 1000) return Math.round(x).toLocaleString("en-US");
  return String(+x.toPrecision(4));
}
function energy(j) {
  if (!isNum(j)) return "—";
  if (j < 1e3) return `${short(j)} J`;
  if (j < 1e6) return `${short(j / 1e3)} kJ`;
  return `${short(j / 3.6e6)} kWh`;
}
function duration(s) {
  if (!isNum(s)) return "—";
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${(s / 60).toFixed(1)} min`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}
function clock(t) {
  const d = new Date(t * 1000);
  return d.toISOString().slice(11, 19);
}
function when(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (isNaN(d)) return esc(iso);
  return d.toISOString().replace("T", " ").slice(0, 19) + " UTC";
}
function badge(state) {
  const s = String(state || "unknown").toLowerCase();
  return `<span class="badge ${esc(s)}">${esc(s)}</span>`;
}
function progress(done, target, state) {
  const p = target > 0 ? Math.min(1, done / target) : 0;
  return `<div class="progress ${esc(state)}"><span style="width:${(p * 100).toFixed(1)}%"></span></div>`;
}
const $ = (sel, root = document) => root.querySelector(sel);
function el(tag, attrs = {}, html = "") {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  e.innerHTML = html;
  return e;
}

// ---------- data ----------
async function api(path, opts) {
  const r = await fetch(path, opts);
  let body = null;
  try { body = await r.json(); } catch (_) { /* not JSON */ }
  if (!r.ok) throw new Error((body && body.error) || `${r.status} ${r.statusText}`);
  return body;
}
function setLive(ok, text) {
  const l = $("#live");
  l.className = "live " + (ok ? "on" : "off");
  l.textContent = text;
}
// Runs `fn` now and every POLL_MS after it finishes (never overlapping), showing liveness.
function poll(fn) {
  const tick = async () => {
    try {
      await fn();
      setLive(true, `live · updated ${new Date().toLocaleTimeString("en-GB")}`);
    } catch (e) {
      setLive(false, `cannot reach the server (${e.message}); retrying`);
    }
    setTimeout(tick, POLL_MS);
  };
  tick();
}

// ---------- the chart renderer ----------
function niceStep(range, count) {
  const raw = range / Math.max(1, count);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const n = raw / mag;
  return (n < 1.5 ? 1 : n < 3 ? 2 : n < 7 ? 5 : 10) * mag;
}
function ticks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const step = niceStep(hi - lo, count);
  const out = [];
  for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return out;
}
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
function timeTicks(lo, hi, count) {
  const step = TIME_STEPS.find((s) => (hi - lo) / s <= count) || 86400 * Math.ceil((hi - lo) / count / 86400);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) out.push(v);
  return { ticks: out, step };
}
function tickLabel(v, step) {
  const a = Math.abs(step);
  if (a >= 1000 && Math.abs(v) >= 1e4) return (v / 1000).toLocaleString("en-US") + "k";
  const d = Math.max(0, -Math.floor(Math.log10(a) + 1e-9));
  return v.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });
}
function svg(tag, attrs, parent) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}
// Keeps a line readable and light at any length: beyond ~2 points a pixel, each pixel column
// keeps its first, lowest, highest and last point, so spikes stay visible.
function decimate(pts, x0, x1, px) {
  if (pts.length <= px * 2) return pts;
  const out = [];
  let col = -1, bucket = [];
  const flush = () => {
    if (!bucket.length) return;
    let lo = bucket[0], hi = bucket[0];
    for (const p of bucket) { if (p[1] < lo[1]) lo = p; if (p[1] > hi[1]) hi = p; }
    const keep = [bucket[0], lo, hi, bucket[bucket.length - 1]].sort((a, b) => a[0] - b[0]);
    for (const k of keep) if (out[out.length - 1] !== k) out.push(k);
    bucket = [];
  };
  for (const p of pts) {
    if (p[1] === null) { flush(); out.push(p); continue; }
    const c = Math.floor(((p[0] - x0) / (x1 - x0 || 1)) * px);
    if (c !== col) { flush(); col = c; }
    bucket.push(p);
  }
  flush();
  return out;
}

/**
 * Draws a chart into `host` (a div). spec: {series, xLabel, yLabel, time, height, yMin, yMax,
 * yZero, count, yLog, fmtY}: with yLog the data's y are log10 of the values and the axis is
 * labelled with the values; fmtY writes a y in the legend and readout. A series: {label, color, type: line|band|dots|diamonds|hline, data, dash,
 * width, value}. Lines take [[x, y|null]], bands [[x, lo, hi]], hlines a `value`. `count` is the
 * index of the series whose point count the SVG exposes as data-points (for tests and readers).
 */
function chart(host, spec) {
  host.classList.add("chart");
  host.innerHTML = "";
  const legend = el("div", { class: "legend" });
  host.appendChild(legend);
  const W = Math.max(280, host.clientWidth || 600), H = spec.height || 240;
  const m = { l: 58, r: 16, t: 10, b: 40 };
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": spec.yLabel || "" }, host);
  const series = spec.series.filter((s) => s && (s.type === "hline" ? isNum(s.value) : s.data && s.data.length));
  const counted = spec.series[spec.count || 0];
  root.setAttribute("data-points", counted && counted.data ? counted.data.length : 0);
  root.setAttribute("data-series", series.map((s) => s.label).join("|"));
  for (const s of spec.series) {
    if (!s) continue;
    const last = s.data && s.data.length ? s.data[s.data.length - 1] : null;
    const latest = s.type === "hline" ? s.value : last ? last[s.type === "band" ? 2 : 1] : null;
    const cls = s.type === "band" ? "band" : s.type === "dots" ? "dot" : s.type === "diamonds" ? "diamond" : s.dash || s.type === "hline" ? "dash" : "";
    const val = s.type === "band" || !isNum(latest) || s.noValue ? "" : ` <b>${(spec.fmtY || short)(latest)}</b>`;
    legend.insertAdjacentHTML("beforeend", `<span class="key"><span class="sw ${cls}" style="${cls === "band" || cls === "dot" || cls === "diamond" ? "background" : "border-color"}:${s.color}"></span>${esc(s.label)}${val}</span>`);
  }
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (const s of series) {
    if (s.type === "hline") { y0 = Math.min(y0, s.value); y1 = Math.max(y1, s.value); continue; }
    for (const p of s.data) {
      if (isNum(p[0])) { x0 = Math.min(x0, p[0]); x1 = Math.max(x1, p[0]); }
      for (let i = 1; i < p.length; i++) if (isNum(p[i])) { y0 = Math.min(y0, p[i]); y1 = Math.max(y1, p[i]); }
    }
  }
  if (!isFinite(x0) || !isFinite(y0)) {
    svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, root).textContent = spec.empty || "No data yet";
    return;
  }
  if (spec.yZero) y0 = Math.min(0, y0);
  if (isNum(spec.yMin)) y0 = spec.yMin;
  if (isNum(spec.yMax)) y1 = Math.max(spec.yMax, y1);
  if (y1 === y0) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
  const pad = (y1 - y0) * 0.06;
  if (!spec.yZero && !isNum(spec.yMin)) y0 -= pad;
  y1 += pad;
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  const yt = ticks(y0, y1, Math.max(3, Math.floor((H - m.t - m.b) / 42)));
  const ystep = yt.length > 1 ? yt[1] - yt[0] : 1;
  // Widen the left margin to the longest y label.
  const ylabels = yt.map((v) => (spec.yLog ? sig(Math.pow(10, v), 2) : tickLabel(v, ystep)));
  m.l = Math.max(46, (spec.yLabel ? 34 : 14) + 6.7 * Math.max(...ylabels.map((s) => s.length)));
  const X = (x) => m.l + ((x - x0) / (x1 - x0)) * (W - m.l - m.r);
  const Y = (y) => m.t + (1 - (y - y0) / (y1 - y0)) * (H - m.t - m.b);
  const grid = svg("g", { "shape-rendering": "crispEdges" }, root);
  yt.forEach((v, i) => {
    if (v < y0 || v > y1) return;
    const y = Math.round(Y(v)) + 0.5;
    svg("line", { x1: m.l, x2: W - m.r, y1: y, y2: y, stroke: "#eef1f5" }, grid);
    svg("text", { x: m.l - 8, y: y + 4, "text-anchor": "end" }, root).textContent = ylabels[i];
  });
  const nx = Math.max(3, Math.floor((W - m.l - m.r) / 80));
  let xt, xlabel;
  if (spec.time) {
    const tt = timeTicks(x0, x1, nx);
    // A span too short for two ticks (a run of a few seconds) labels its two ends instead.
    xt = tt.ticks.length >= 2 ? tt.ticks : [x0, x1];
    xlabel = (v) => (tt.step >= 60 && tt.ticks.length >= 2 ? clock(v).slice(0, 5) : clock(v));
  } else {
    xt = ticks(x0, x1, nx).filter((v) => v >= x0 && v <= x1);
    const st = xt.length > 1 ? xt[1] - xt[0] : 1;
    xlabel = (v) => tickLabel(v, st);
  }
  for (const v of xt) {
    const x = Math.round(X(v)) + 0.5;
    svg("line", { x1: x, x2: x, y1: m.t, y2: H - m.b, stroke: "#f3f5f8" }, grid);
    svg("line", { x1: x, x2: x, y1: H - m.b, y2: H - m.b + 4, stroke: "#9aa3af" }, grid);
    svg("text", { x, y: H - m.b + 17, "text-anchor": "middle" }, root).textContent = xlabel(v);
  }
  svg("line", { x1: m.l, x2: W - m.r, y1: Math.round(H - m.b) + 0.5, y2: Math.round(H - m.b) + 0.5, stroke: "#9aa3af" }, grid);
  svg("line", { x1: Math.round(m.l) + 0.5, x2: Math.round(m.l) + 0.5, y1: m.t, y2: H - m.b, stroke: "#9aa3af" }, grid);
  if (spec.xLabel) svg("text", { x: m.l + (W - m.l - m.r) / 2, y: H - 4, "text-anchor": "middle", class: "axis-title" }, root).textContent = spec.xLabel;
  if (spec.yLabel) {
    const t = svg("text", { x: 0, y: 0, "text-anchor": "middle", class: "axis-title", transform: `translate(12 ${m.t + (H - m.t - m.b) / 2}) rotate(-90)` }, root);
    t.textContent = spec.yLabel;
  }
  const clipId = "c" + Math.random().toString(36).slice(2);
  svg("rect", { x: m.l, y: m.t - 1, width: W - m.l - m.r, height: H - m.t - m.b + 2 }, svg("clipPath", { id: clipId }, svg("defs", {}, root)));
  const plot = svg("g", { "clip-path": `url(#${clipId})` }, root);
  const px = W - m.l - m.r;
  for (const s of series) {
    if (s.type === "band") {
      const pts = s.data.filter((p) => isNum(p[1]) && isNum(p[2]));
      if (pts.length < 2) continue;
      const step = Math.max(1, Math.floor(pts.length / (px * 2)));
      const thin = pts.filter((_, i) => i % step === 0);
      const up = thin.map((p) => `${X(p[0]).toFixed(1)},${Y(p[2]).toFixed(1)}`);
      const dn = thin.slice().reverse().map((p) => `${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`);
      svg("path", { d: "M" + up.join("L") + "L" + dn.join("L") + "Z", fill: s.color, "fill-opacity": s.opacity || 0.16, stroke: "none" }, plot);
    } else if (s.type === "hline") {
      const y = Y(s.value);
      svg("line", { x1: m.l, x2: W - m.r, y1: y, y2: y, stroke: s.color, "stroke-width": 1.3, "stroke-dasharray": "6 4" }, plot);
    } else if (s.type === "dots" || s.type === "diamonds") {
      const r = s.r || 3.2;
      for (const p of s.data) {
        if (!isNum(p[1])) continue;
        const cx = X(p[0]), cy = Y(p[1]);
        if (s.type === "dots") svg("circle", { cx: cx.toFixed(1), cy: cy.toFixed(1), r, fill: s.color, stroke: "#fff", "stroke-width": 1 }, plot);
        else svg("path", { d: `M${cx},${cy - r - 1.5}l${r + 1.5},${r + 1.5}l${-r - 1.5},${r + 1.5}l${-r - 1.5},${-r - 1.5}z`, fill: s.color, stroke: "#fff", "stroke-width": 1.2 }, plot);
      }
    } else {
      const pts = decimate(s.data, x0, x1, px);
      let d = "", pen = false;
      const lone = [];
      pts.forEach((p, i) => {
        if (!isNum(p[1])) { pen = false; return; }
        d += (pen ? "L" : "M") + X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1);
        // A point with no neighbour draws no segment: mark it so it is seen.
        if (!pen && !(pts[i + 1] && isNum(pts[i + 1][1]))) lone.push(p);
        pen = true;
      });
      const attrs = { d, fill: "none", stroke: s.color, "stroke-width": s.width || 1.6, "stroke-linejoin": "round", "stroke-linecap": "round" };
      if (s.dash) attrs["stroke-dasharray"] = s.dash;
      if (s.opacity) attrs["stroke-opacity"] = s.opacity;
      svg("path", attrs, plot);
      for (const p of lone) svg("circle", { cx: X(p[0]).toFixed(1), cy: Y(p[1]).toFixed(1), r: 2.5, fill: s.color }, plot);
    }
  }
  if (spec.refLabel) {
    const r = series.find((s) => s.type === "hline");
    if (r) svg("text", { x: W - m.r - 4, y: Y(r.value) - 5, "text-anchor": "end", style: "fill:" + r.color }, root).textContent = spec.refLabel;
  }
  hover(host, root, series, { X, Y, x0, x1, m, W, H, time: spec.time, xName: spec.xName || spec.xLabel || "x", fmtY: spec.fmtY || short });
}

// A crosshair and a readout of every line at the nearest x under the pointer.
function hover(host, root, series, g) {
  const lines = series.filter((s) => s.type === "line" || s.type === undefined || s.type === "dots" || s.type === "diamonds");
  if (!lines.length) return;
  const tip = el("div", { class: "tip" });
  host.appendChild(tip);
  const cross = svg("line", { y1: g.m.t, y2: g.H - g.m.b, stroke: "#1b2230", "stroke-opacity": 0.35, "stroke-width": 1, visibility: "hidden" }, root);
  const nearest = (data, x) => {
    let lo = 0, hi = data.length - 1;
    while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (data[mid][0] < x) lo = mid; else hi = mid; }
    return Math.abs(data[lo][0] - x) <= Math.abs(data[hi][0] - x) ? data[lo] : data[hi];
  };
  root.addEventListener("mousemove", (ev) => {
    const r = root.getBoundingClientRect();
    const sx = ((ev.clientX - r.left) / r.width) * g.W;
    if (sx < g.m.l || sx > g.W - g.m.r) { tip.style.display = "none"; cross.setAttribute("visibility", "hidden"); return; }
    const x = g.x0 + ((sx - g.m.l) / (g.W - g.m.l - g.m.r)) * (g.x1 - g.x0);
    const main = nearest(lines[0].data, x);
    const rows = [`<div>${esc(g.xName)} <b>${g.time ? clock(main[0]) : int(main[0])}</b></div>`];
    for (const s of lines) {
      const p = nearest(s.data, x);
      if (s.type !== "line" && s.type !== undefined && Math.abs(g.X(p[0]) - g.X(main[0])) > 3) continue;
      if (isNum(p[1])) rows.push(`<div><span class="sw" style="background:${s.color}"></span>${esc(s.label)} <b>${g.fmtY(p[1])}</b></div>`);
    }
    tip.innerHTML = rows.join("");
    tip.style.display = "block";
    const cx = g.X(main[0]);
    cross.setAttribute("x1", cx); cross.setAttribute("x2", cx); cross.setAttribute("visibility", "visible");
    const left = (cx / g.W) * r.width;
    tip.style.left = (left > r.width * 0.6 ? left - tip.offsetWidth - 12 : left + 12) + "px";
    tip.style.top = "34px";
  });
  root.addEventListener("mouseleave", () => { tip.style.display = "none"; cross.setAttribute("visibility", "hidden"); });
}

// Redraws every chart when the window's width changes.
const redraws = new Map();
function draw(id, spec) {
  const host = document.getElementById(id);
  if (!host) return;
  redraws.set(id, spec);
  chart(host, spec);
}
let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => redraws.forEach((spec, id) => { const h = document.getElementById(id); if (h) chart(h, spec); }), 150);
});

// ---------- the runs page ----------
function runsPage() {
  const main = $("#main");
  main.innerHTML = `
    <div class="kicker">Training runs</div>
    <h1>Runs</h1>
    <p class="lede">Every run recorded in <code id="dir">runs/</code>: each with its system, device, state and steps. The page follows the records as the trainer writes them, every two seconds. The <a href="/systems">systems catalogue</a> lists what can be trained.</p>
    <div class="card"><table id="runs-table"><thead><tr>
      <th>Run</th><th>System</th><th>Device</th><th>State</th><th>Steps</th><th></th><th class="num">Latest loss</th><th>Updated</th>
    </tr></thead><tbody></tbody></table><p id="runs-empty" class="muted" hidden></p><div id="runs-skipped"></div></div>`;
  poll(async () => {
    const d = await api("/api/runs");
    $("#dir").textContent = d.runs_dir;
    $("#runs-dir").textContent = d.runs_dir;
    const body = $("#runs-table tbody");
    body.innerHTML = d.runs.map((r) => `<tr data-run="${esc(r.name)}">
      <td><a href="/runs/${encodeURIComponent(r.name)}"><b>${esc(r.name)}</b></a>${r.skipped_lines ? ` <span class="badge stopped" title="lines that did not parse">${r.skipped_lines} skipped</span>` : ""}${r.problem ? `<div class="muted" style="font-size:12.5px">${esc(r.problem)}</div>` : ""}</td>
      <td>${esc(r.system || "—")}</td><td>${esc(r.device || "—")}${r.gates_skipped ? ` <span class="badge failed" data-gates-skipped>gates skipped</span>` : ""}</td><td>${badge(r.state)}</td>
      <td class="num">${int(r.steps_done)}${r.steps_target ? ` <span class="muted">of ${int(r.steps_target)}</span>` : ""}</td>
      <td style="width:140px">${r.steps_target ? progress(r.steps_done || 0, r.steps_target, r.state) : ""}</td>
      <td class="num">${fmt(r.latest_loss, 4)}</td><td class="muted">${when(r.updated_at)}</td></tr>`).join("");
    $("#runs-skipped").innerHTML = (d.skipped || []).map((k) => `<div class="notice" data-skipped-run="${esc(k.name)}">${esc(k.name)} is not shown: ${esc(k.reason)}.</div>`).join("");
    const empty = $("#runs-empty");
    empty.hidden = d.runs.length > 0;
    empty.textContent = `No runs yet in ${d.runs_dir}. A run appears here as soon as its trainer writes run.json.`;
  });
}

// ---------- the run page ----------
function runPage(name) {
  const enc = encodeURIComponent(name);
  const main = $("#main");
  main.innerHTML = `
    <div class="kicker"><a href="/">All runs</a> / ${esc(name)}</div>
    <div class="hero"><div><h1 id="run-title">${esc(name)}</h1><div class="badges" id="run-badges"></div></div>
      <div style="min-width:260px"><div class="muted" id="run-steps" style="text-align:right;font-size:14px"></div><div id="run-progress"></div></div></div>
    <p class="lede" id="run-lede"></p>
    <div id="run-notices"></div>
    <div class="stats" id="headline"></div>
    <section class="card" id="loss-card"><h2>Loss</h2>
      <p class="sub" id="loss-sub">Cross-entropy at every step.</p>
      <div id="chart-loss"></div>
      <div class="grid3" style="margin-top:14px">
        <div><h3>Milliseconds a step</h3><div id="chart-ms"></div></div>
        <div><h3>Learning rate</h3><div id="chart-lr"></div></div>
        <div><h3>Gradient norm</h3><div id="chart-grad"></div></div>
      </div></section>
    <section class="card" id="model-card" hidden><h2>Inside the model</h2>
      <p class="sub">What the system declares of its insides: figures read from every kept checkpoint of this run (only the tensors they need), drawn against the step, and what its definition fixes.</p>
      <div id="model-views"></div></section>
    <section class="card" id="gates-card"><h2>Gates before the run</h2>
      <p class="sub">Each gate compares the device with the CPU reference on the same weights and inputs, on the initial weights and on perturbed ones; each must hold, with its evidence, before a GPU run starts. The system's ledger, oldest first: a failed gate stays on it as failed.</p>
      <div id="gates-note"></div><ol class="gates" id="gates-list"></ol></section>
    <section class="card" id="curve-card"><div class="section-head"><h2>Held-out bits per byte against cost</h2><span id="curve-pick"></span></div>
      <p class="sub" id="curve-sub">Each scored checkpoint's held-out bits per byte against the training seconds (from the run's first step) and the GPU's joules it took to reach; the band is ±2 standard errors over windows. Tick other runs to overlay them as baselines.</p>
      <div class="grid2"><div><h3>Against training seconds</h3><div id="chart-curve-time"></div></div><div><h3>Against energy</h3><div id="chart-curve-energy"></div></div></div>
      <p class="sub" id="curve-heldout"></p>
      <h3 style="margin-top:14px">Text at each scored checkpoint</h3>
      <div class="scroll" style="max-height:420px"><table id="samples-table"><thead><tr><th class="num">Step</th><th class="num">Training s</th><th class="num">Bits/byte</th><th>This run writes</th><th>The baseline at the nearest cost</th></tr></thead><tbody></tbody></table></div></section>
    <section class="card" id="profile-card"><div class="section-head"><h2>Where a step's time goes</h2><span id="profile-pick"></span></div>
      <p class="sub" id="profile-sub"></p><div class="grid2" id="profile-tables"></div></section>
    <section class="card" id="telemetry-card"><div class="section-head"><h2>GPU telemetry</h2><span class="tabs" id="tele-window"></span></div>
      <p class="sub" id="gpu-sub"></p>
      <div class="grid4" id="gpu-charts"></div>
      <h2 style="margin-top:22px">Host telemetry</h2><p class="sub">The machine's 1-minute load and available memory, and the trainer process's resident memory and CPU.</p>
      <div class="grid2" id="host-charts"></div></section>
    <section class="card" id="health-card"><h2>Optimizer health</h2>
      <p class="sub" id="health-sub">No health step recorded yet (<code>alpha train --health-every N</code> records one every N updates and at each invocation's last).</p>
      <div class="scroll" style="max-height:420px"><table id="health-table"><thead></thead><tbody></tbody></table></div>
      <h3 style="margin-top:18px">Update norm ÷ parameter norm by tensor over time</h3>
      <p class="sub">log₁₀ of ‖Δw‖ / ‖w‖ at each health step, one row a tensor; red where any figure of the tensor was not finite.</p>
      <div class="scroll" style="max-height:520px" id="health-heat"></div></section>
    <section class="card" id="lineage-card"><h2>Checkpoint lineage</h2>
      <p class="sub">Every checkpoint, newest first: the step it holds, its losses, the wall seconds of its invocation, the training seconds (each step's device time, its wall time where it has none) and energy from the run's first step, and its SHA-256. Each resumes from its parent.</p>
      <div class="scroll"><table id="lineage-table"><thead><tr><th class="num">Step</th><th class="num">Train loss</th><th class="num">Held-out loss</th><th class="num">Held-out bits/byte</th><th class="num">Wall s</th><th class="num">Training s</th><th class="num">Energy</th><th>Written</th><th>SHA-256</th></tr></thead><tbody></tbody></table></div>
      <h3 style="margin-top:18px">Invocations</h3>
      <div class="scroll" style="max-height:260px"><table id="invocations-table"><thead><tr><th class="num">k</th><th>Steps</th><th class="num">Unseen loss</th><th class="num">Last loss</th><th class="num">Wall s</th><th class="num">Device s</th></tr></thead><tbody></tbody></table></div></section>
    <section class="card" id="probe-card"><h2>Prompt probe</h2>
      <p class="sub">What a saved checkpoint says next: its most likely next tokens after the prompt, and a short greedy continuation.</p>
      <form class="probe-form" id="probe-form">
        <label>Checkpoint<select id="probe-ckpt"></select></label>
        <label>Prompt<textarea id="probe-prompt" rows="1">The </textarea></label>
        <label>Tokens<input id="probe-tokens" type="number" min="1" max="512" value="48" style="width:90px"></label>
        <button id="probe-go" type="submit">Probe</button>
      </form><div id="probe-out"></div></section>
    <section class="card"><h2>Run</h2><p class="sub">run.json as the trainer last wrote it.</p><dl class="kv" id="run-kv"></dl></section>`;

  const st = { cols: null, total: 0, lineage: [], vocab: null, teleWindow: 0, teleRows: -1, profileRows: -1, profileStep: null, invRows: -1, lineageKey: "", gatesKey: "", baselines: new Set(), curveKey: "", others: "" };
  const windows = [["all", 0], ["1 h", 3600], ["10 min", 600]];
  $("#tele-window").innerHTML = windows.map(([l, s]) => `<button type="button" data-s="${s}" class="${s === 0 ? "on" : ""}">${l}</button>`).join("");
  $("#tele-window").addEventListener("click", (e) => {
    const s = e.target.getAttribute("data-s");
    if (s === null) return;
    st.teleWindow = +s; st.teleRows = -1;
    for (const b of $("#tele-window").children) b.classList.toggle("on", b === e.target);
    refreshTelemetry();
  });
  $("#probe-form").addEventListener("submit", (e) => { e.preventDefault(); runProbe(); });

  async function runProbe() {
    const out = $("#probe-out");
    const prompt = $("#probe-prompt").value;
    $("#probe-go").disabled = true;
    out.innerHTML = `<p class="muted">Running the checkpoint…</p>`;
    try {
      const r = await api(`/api/runs/${enc}/probe`, {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ checkpoint: $("#probe-ckpt").value, prompt, tokens: +$("#probe-tokens").value || 32 }),
      });
      const top = r.top_next.map(([tok, p]) => `<tr><td><code>${esc(JSON.stringify(tok))}</code></td><td class="num">${(p * 100).toFixed(1)}%</td><td style="width:55%"><span class="sharebar" style="width:${(p * 100).toFixed(1)}%"></span></td></tr>`).join("");
      out.innerHTML = `<div class="continuation" id="probe-continuation"><span class="prompt">${esc(prompt)}</span>${esc(r.continuation)}</div>
        <h3>Most likely next tokens</h3><table id="probe-top"><thead><tr><th>Token</th><th class="num">Probability</th><th></th></tr></thead><tbody>${top}</tbody></table>`;
    } catch (e) {
      out.innerHTML = `<div class="notice bad">${esc(e.message)}</div>`;
    }
    $("#probe-go").disabled = false;
  }

  function drawLoss() {
    const c = st.cols;
    if (!c) return;
    const keep = currentLine(c.step);
    const loss = [], band = [], unseen = [], mean = [], left = [];
    let hasBand = false, win = [], sum = 0;
    for (let i = 0; i < c.step.length; i++) {
      const s = c.step[i], l = c.loss[i];
      if (!keep[i]) {
        // A break between stretches of rows that a resume left behind.
        if (left.length && (keep[i - 1] || s <= left[left.length - 1][0])) left.push([left[left.length - 1][0], null]);
        left.push([s, l]);
        continue;
      }
      loss.push([s, l]);
      if (isNum(c.p10[i]) && isNum(c.p90[i])) { band.push([s, c.p10[i], c.p90[i]]); hasBand = true; }
      if (c.unseen[i]) unseen.push([s, l]);
      if (isNum(l)) { win.push(l); sum += l; if (win.length > 20) sum -= win.shift(); mean.push([s, sum / win.length]); }
    }
    const thin = (arr, n) => (arr.length <= n ? arr : arr.filter((_, i) => i % Math.ceil(arr.length / n) === 0));
    const onLine = currentLine(st.lineage.map((r) => r.step));
    const held = st.lineage.filter((r, i) => onLine[i] && isNum(r.heldout_loss)).map((r) => [r.step, r.heldout_loss]);
    const ln = isNum(st.vocab) && st.vocab > 1 ? Math.log(st.vocab) : null;
    draw("chart-loss", {
      height: 340, xLabel: "step", xName: "step", yLabel: "loss, nats", count: 0,
      refLabel: ln ? `ln ${int(st.vocab)} = ${ln.toFixed(3)}: a model that knows nothing` : null,
      series: [
        { label: "every step", type: "line", color: COLORS.loss, data: loss, width: loss.length > 400 ? 1 : 1.6, opacity: loss.length > 60 ? 0.55 : 1 },
        hasBand ? { label: "p10–p90 across positions", type: "band", color: COLORS.band, data: band } : null,
        loss.length > 60 ? { label: "mean of the last 20 steps", type: "line", color: "#123a85", data: mean, width: 2 } : null,
        // When every step is on a fresh context (a streaming trainer) dots would only hide the line.
        unseen.length && unseen.length < loss.length ? { label: "first step of an invocation (unseen context)", type: "dots", color: COLORS.unseen, data: thin(unseen, 600) } : null,
        held.length ? { label: "held-out, at checkpoints", type: "diamonds", color: COLORS.held, data: held, r: 4 } : null,
        ln ? { label: `ln vocab`, type: "hline", color: COLORS.ref, value: ln, noValue: true } : null,
        left.length ? { label: "steps a resume from an earlier checkpoint left behind", type: "line", color: COLORS.ref, data: left, width: 1, opacity: 0.6, noValue: true } : null,
      ],
    });
    const svgEl = $("#chart-loss svg");
    if (svgEl) {
      svgEl.setAttribute("data-unseen", unseen.length);
      svgEl.setAttribute("data-left", left.filter((p) => p[1] !== null).length);
    }
    const xs = (arr) => c.step.map((s, i) => [s, arr[i]]).filter((_, i) => keep[i]);
    // Wall time is the host's clock around the whole step; device time the backend's own clock
    // around its runs (CUDA events around each graph; on the CPU, the host clock around its kernels).
    const dev = xs(c.device_ms).filter((p) => isNum(p[1]));
    draw("chart-ms", { height: 190, xLabel: "step", yLabel: "ms", yZero: true, series: [
      { label: "wall ms (host clock)", type: "line", color: COLORS.b, data: xs(c.ms) },
      { label: "device ms (device clock)", type: "line", color: COLORS.e, data: dev },
    ] });
    const msSvg = $("#chart-ms svg");
    if (msSvg) msSvg.setAttribute("data-device", dev.length);
    draw("chart-lr", { height: 190, xLabel: "step", yLabel: "learning rate", yZero: true, series: [{ label: "learning rate", type: "line", color: COLORS.d, data: xs(c.lr) }] });
    const g = xs(c.grad_norm);
    draw("chart-grad", { height: 190, xLabel: "step", yLabel: "‖g‖", yZero: true, empty: "No gradient norms recorded", series: [{ label: "gradient norm", type: "line", color: COLORS.c, data: g.some((p) => isNum(p[1])) ? g : [] }] });
  }

  // The line the run now continues, as a mask over rows in file order: walking back from the
  // newest row, a row is on it when its step is below every step kept so far. A resume from an
  // earlier checkpoint (a branch, or a rerun after a crash) writes steps again from there, so
  // the rows it passes over are the ones that resume left behind.
  function currentLine(steps) {
    const keep = new Array(steps.length).fill(false);
    let low = Infinity;
    for (let i = steps.length - 1; i >= 0; i--) if (steps[i] < low) { keep[i] = true; low = steps[i]; }
    return keep;
  }

  async function refreshPoints() {
    const d = await api(`/api/runs/${enc}/points?since=${st.total}`);
    if (d.total < st.total || !st.cols) {
      // First load, or the file was rewritten: start over.
      const full = d.since === 0 ? d : await api(`/api/runs/${enc}/points?since=0`);
      st.cols = {}; for (const k of ["step", "loss", "lr", "tokens", "ms", "device_ms", "unseen", "p10", "p90", "grad_norm"]) st.cols[k] = full[k];
      st.total = full.total;
      return true;
    }
    if (d.total === st.total) return false;
    for (const k of Object.keys(st.cols)) st.cols[k].push(...d[k]);
    st.total = d.total;
    return true;
  }

  async function refreshTelemetry() {
    const since = st.teleWindow ? `&since=${Date.now() / 1000 - st.teleWindow}` : "";
    const t = await api(`/api/runs/${enc}/telemetry?max=1200${since}`);
    if (t.rows === st.teleRows && t.rows > 0) return;
    st.teleRows = t.rows;
    const S = (k, scale = 1) => (t.series[k] ? t.t.map((x, i) => [x, isNum(t.series[k][i]) ? t.series[k][i] * scale : null]) : []);
    const spec = (yLabel, series, extra = {}) => ({ height: 200, time: true, xLabel: "time, UTC", xName: "time", yLabel, series, ...extra });
    const gpuSub = $("#gpu-sub");
    const last = t.last || {};
    if (t.gpu_available) {
      const g = last.gpu || {};
      gpuSub.innerHTML = `${esc(t.gpu_name || "GPU")} through NVML, sampled every second; ${int(t.rows)} samples${t.bucket > 1 ? `, averaged ${t.bucket} to a point` : ""}. Energy since the sampler started: <b>${energy(g.energy_j)}</b>${g.clock_events && g.clock_events.length ? `; clock events now: ${esc(g.clock_events.join(", "))}` : ""}.`;
      const gib = 1 / 1024;
      const grid = $("#gpu-charts");
      if (!grid.children.length) grid.innerHTML = ["util", "power", "temp", "clocks", "mem", "energy", "pstate", "pcie"].map((k) => `<div><h3 id="h-gpu-${k}"></h3><div id="chart-gpu-${k}"></div></div>`).join("");
      const titles = { util: "Utilization, %", power: "Power, W", temp: "Temperature, °C", clocks: "Clocks, MHz", mem: "Device memory, GiB", energy: "Energy since start, kJ", pstate: "P-state and clock events", pcie: "PCIe, MB/s" };
      for (const [k, v] of Object.entries(titles)) $("#h-gpu-" + k).textContent = v;
      draw("chart-gpu-util", spec("%", [{ label: "GPU busy", type: "line", color: COLORS.a, data: S("gpu.util_pct") }, { label: "memory controller", type: "line", color: COLORS.b, data: S("gpu.mem_util_pct") }], { yMin: 0, yMax: 100 }));
      draw("chart-gpu-power", spec("W", [{ label: "draw", type: "line", color: COLORS.c, data: S("gpu.power_w") }, { label: "limit", type: "line", color: COLORS.f, dash: "6 4", data: S("gpu.power_limit_w") }], { yZero: true }));
      draw("chart-gpu-temp", spec("°C", [{ label: "core", type: "line", color: COLORS.e, data: S("gpu.temp_c") }]));
      draw("chart-gpu-clocks", spec("MHz", [{ label: "SM", type: "line", color: COLORS.a, data: S("gpu.sm_clock_mhz") }, { label: "memory", type: "line", color: COLORS.d, data: S("gpu.mem_clock_mhz") }], { yZero: true }));
      draw("chart-gpu-mem", spec("GiB", [{ label: "used", type: "line", color: COLORS.b, data: S("gpu.mem_used_mib", gib) }, { label: "total", type: "line", color: COLORS.f, dash: "6 4", data: S("gpu.mem_total_mib", gib) }], { yZero: true }));
      draw("chart-gpu-energy", spec("kJ", [{ label: "energy", type: "line", color: COLORS.e, data: S("gpu.energy_j", 1e-3) }], { yZero: true }));
      draw("chart-gpu-pstate", spec("P-state / active", [{ label: "P-state (0 fastest)", type: "line", color: COLORS.d, data: S("gpu.pstate") }, { label: "clock event active", type: "line", color: COLORS.c, data: S("gpu.clock_event_active") }], { yZero: true }));
      draw("chart-gpu-pcie", spec("MB/s", [{ label: "to the GPU", type: "line", color: COLORS.a, data: S("gpu.pcie_rx_mbps") }, { label: "from the GPU", type: "line", color: COLORS.c, data: S("gpu.pcie_tx_mbps") }], { yZero: true }));
    } else {
      $("#gpu-charts").innerHTML = "";
      gpuSub.innerHTML = t.rows
        ? `<span class="notice info" style="display:block">No GPU telemetry for this run: ${esc(t.note || "the sampler found no GPU")}. The host is recorded below.</span>`
        : `No telemetry.jsonl yet.`;
    }
    const host = $("#host-charts");
    if (!host.children.length) host.innerHTML = [["load", "Load average, 1 min"], ["mem", "Memory available, GiB"], ["rss", "Trainer resident memory, MiB"], ["cpu", "Trainer CPU, % of one core"]].map(([k, h]) => `<div><h3>${h}</h3><div id="chart-host-${k}"></div></div>`).join("");
    draw("chart-host-load", spec("load", [{ label: "1-minute load", type: "line", color: COLORS.a, data: S("host.load1") }], { yZero: true }));
    draw("chart-host-mem", spec("GiB", [{ label: "available", type: "line", color: COLORS.b, data: S("host.mem_available_mib", 1 / 1024) }, { label: "total", type: "line", color: COLORS.f, dash: "6 4", data: S("host.mem_total_mib", 1 / 1024) }], { yZero: true }));
    draw("chart-host-rss", spec("MiB", [{ label: "resident", type: "line", color: COLORS.d, data: S("host.rss_mib") }], { yZero: true }));
    draw("chart-host-cpu", spec("%", [{ label: "CPU", type: "line", color: COLORS.c, data: S("host.cpu_pct") }], { yZero: true }));
  }

  async function refreshProfile(rows) {
    if (rows === st.profileRows) return;
    st.profileRows = rows;
    const p = await api(`/api/runs/${enc}/profile${st.profileStep ? `?step=${st.profileStep}` : ""}`);
    if (!p.step) {
      $("#profile-sub").textContent = "No profiled step recorded yet: a profiled build times every launch of one step and writes profile.jsonl.";
      $("#profile-tables").innerHTML = "";
      return;
    }
    $("#profile-sub").innerHTML = `Step ${int(p.step)}: <b>${fmt(p.total_ms, 2)} ms</b> in ${int(p.launches)} launches, each timed on the device.`;
    $("#profile-pick").innerHTML = p.steps.length > 1 ? `<label class="muted" style="font-size:13px">profiled step <select id="profile-step">${p.steps.map((s) => `<option ${s === p.step ? "selected" : ""}>${s}</option>`).join("")}</select></label>` : "";
    const sel = $("#profile-step");
    if (sel) sel.onchange = () => { st.profileStep = +sel.value; st.profileRows = -1; refreshProfile(rows); };
    const maxShare = Math.max(...p.families.map((f) => f.share), 1e-9);
    const fam = p.families.map((f) => `<tr><td>${esc(f.family)}</td><td class="num">${fmt(f.ms, 2)}</td><td class="num" style="width:34%"><span class="sharebar" style="width:${((f.share / maxShare) * 70).toFixed(1)}%"></span>${(f.share * 100).toFixed(1)}%</td><td class="num">${int(f.launches)}</td></tr>`).join("");
    const shp = p.shapes.map((s) => `<tr><td>${esc(s.name)}</td><td><code>${esc(s.shape)}</code></td><td class="num">${fmt(s.us, 1)}</td><td class="num">${isNum(s.tflops) ? fmt(s.tflops, 1) : "—"}</td><td class="num">${int(s.launches)}</td></tr>`).join("");
    $("#profile-tables").innerHTML = `
      <div><h3>Kernel families</h3><table id="family-table"><thead><tr><th>Family</th><th class="num">ms a step</th><th class="num">Share</th><th class="num">Launches</th></tr></thead><tbody>${fam}</tbody></table></div>
      <div><h3>GEMM shapes (µs a launch, TFLOP/s)</h3>${p.shapes.length ? `<table id="shape-table"><thead><tr><th>Launch</th><th>Shape</th><th class="num">µs</th><th class="num">TFLOP/s</th><th class="num">× a step</th></tr></thead><tbody>${shp}</tbody></table>` : `<p class="muted">No GEMM launches in this step.</p>`}</div>`;
  }

  function renderHeadline(d) {
    const run = d.run || {}, h = d.headline || {};
    st.vocab = run.vocab;
    $("#run-badges").innerHTML = `${badge(d.state)}${run.system ? `<span class="badge plain">${esc(run.system)}</span>` : ""}${run.device ? `<span class="badge plain">${esc(run.device)}</span>` : ""}`;
    $("#run-steps").innerHTML = `${int(h.steps_done)} of ${int(h.steps_target)} steps`;
    $("#run-progress").innerHTML = progress(h.steps_done || 0, h.steps_target || 0, d.state);
    const shape = [run.batch && run.context ? `batch ${int(run.batch)} × context ${int(run.context)}` : null, run.vocab ? `vocabulary ${int(run.vocab)}` : null, isNum(run.seed) ? `seed ${run.seed}` : null].filter(Boolean).join(" · ");
    $("#run-lede").innerHTML = `${esc(run.system || "A system")} training on ${esc(run.device || "an unknown device")}${run.parameters ? `: ${int(run.parameters)} parameters` : ""}${shape ? `, ${shape}` : ""}. Started ${when(run.started_at)}; last written ${when(run.updated_at)}.`;
    const notices = [];
    if (d.problem) notices.push(`<div class="notice">${esc(d.problem)}</div>`);
    if (run.message) notices.push(`<div class="notice ${d.state === "failed" ? "bad" : "info"}">${esc(run.message)}</div>`);
    if (run.gates && run.gates.skipped) notices.push(`<div class="notice bad" id="gates-skipped">Started with --skip-gates: no passing record of the ${esc(run.gates.missing.join(", "))} gate(s) for its build on the ${esc(run.gates.device)}. Its losses are not shown equal to the reference's.</div>`);
    for (const [file, f] of Object.entries(d.files || {})) {
      if (f.problem) notices.push(`<div class="notice bad" data-unread="${esc(file)}">${esc(file)}.jsonl is not read: ${esc(f.problem)}.</div>`);
      if (f.behind) notices.push(`<div class="notice info">Still reading ${esc(file)}.jsonl: it is large, and each poll reads part of it.</div>`);
      if (f.skipped) notices.push(`<div class="notice" data-skipped="${esc(file)}">${int(f.skipped)} line${f.skipped > 1 ? "s" : ""} of ${esc(file)}.jsonl did not parse and ${f.skipped > 1 ? "were" : "was"} skipped${f.first_bad_lines && f.first_bad_lines.length ? ` (line ${f.first_bad_lines.join(", ")})` : ""}.</div>`);
    }
    $("#run-notices").innerHTML = notices.join("");
    const stat = (label, value, unit, note, id) => `<div class="stat" id="stat-${id}"><div class="label">${label}</div><div class="value">${value}${unit ? `<small>${unit}</small>` : ""}</div><div class="note">${note || "&nbsp;"}</div></div>`;
    const ept = h.energy_per_token_j;
    $("#headline").innerHTML = [
      stat("Tokens per second", int(h.tokens_per_s), "", isNum(h.tokens_per_s_recent) && d.state === "running" ? "over the last 20 steps" : "end to end", "tps"),
      stat("Milliseconds a step", fmt(h.ms_per_step, 2), "ms", `wall, mean of the last 20 steps${isNum(h.device_ms_per_step) ? `; device ${fmt(h.device_ms_per_step, 2)} ms` : ""}`, "ms"),
      stat("Latest held-out loss", fmt(h.latest_heldout, 4), "", isNum(h.latest_heldout_step) ? `at step ${int(h.latest_heldout_step)}` : "no checkpoint scored yet", "heldout"),
      stat("Best held-out loss", fmt(h.best_heldout, 4), "", isNum(h.best_heldout_step) ? `at step ${int(h.best_heldout_step)}` : "", "best"),
      stat("Latest training loss", fmt(h.latest_loss, 4), "", isNum(h.best_loss) ? `best ${fmt(h.best_loss, 4)}` : "", "loss"),
      stat("Steps done", int(h.steps_done), "", h.steps_target ? `of ${int(h.steps_target)}; ${int(h.tokens)} tokens` : "", "steps"),
      isNum(h.budget_s) ? stat("Budget left", secs(h.budget_s - (h.elapsed_s || 0)), "", `of ${secs(h.budget_s)} of training time; rate ×${fmt(h.lr_factor, 3)}`, "budget") : "",
      isNum(ept) ? stat("Energy per token", sig(ept * 1000, 3), "mJ", `${sig(h.energy_j / 1000, 3)} kJ in all`, "energy") : "",
    ].join("");
    $("#run-kv").innerHTML = Object.entries(run).filter(([, v]) => v !== null && typeof v !== "object").map(([k, v]) => `<dt>${esc(k)}</dt><dd>${typeof v === "number" ? (Number.isInteger(v) ? int(v) : sig(v, 5)) : esc(v)}</dd>`).join("")
      + (run.summary ? Object.entries(run.summary).map(([k, v]) => `<dt>summary.${esc(k)}</dt><dd>${typeof v === "number" ? sig(v, 5) : esc(JSON.stringify(v))}</dd>`).join("") : "");
    if (!d.probe_available) {
      $("#probe-go").disabled = true;
      $("#probe-out").innerHTML = `<p class="muted">This server was started without a probe.</p>`;
    }
  }

  function renderLineage(rows, health) {
    const key = JSON.stringify(rows.map((r) => r.sha256));
    if (key === st.lineageKey) return false;
    st.lineageKey = key;
    st.lineage = rows;
    const newest = rows.slice().reverse();
    $("#lineage-table tbody").innerHTML = newest.map((r) => `<tr data-step="${r.step}" data-sha="${esc(r.sha256)}" data-path="${esc(r.path)}">
      <td class="num"><b>${int(r.step)}</b>${r.branch ? ` <span class="badge plain" title="${esc(r.path)}">branch ${int(r.branch)}</span>` : ""}</td><td class="num">${fmt(r.train_loss, 4)}</td><td class="num">${fmt(r.heldout_loss, 4)}</td><td class="num">${fmt(r.heldout_bpb, 4)}</td>
      <td class="num">${fmt(r.wall_s, 2)}</td><td class="num">${fmt(r.device_s, 2)}</td><td class="num">${energy(r.energy_j)}</td><td class="muted">${when(r.time)}</td>
      <td><span class="sha" title="${esc(r.sha256)}">${esc(String(r.sha256).slice(0, 16))}…</span></td></tr>`).join("")
      || `<tr><td colspan="9" class="muted">No checkpoint yet.</td></tr>`;
    const sel = $("#probe-ckpt");
    const chosen = sel.value;
    sel.innerHTML = newest.map((r) => `<option value="${esc(r.path)}">step ${int(r.step)} · ${esc(String(r.sha256).slice(0, 8))}</option>`).join("");
    if (chosen) sel.value = chosen;
    return true;
  }

  // The gate ledger, oldest first, each record with its figures against their thresholds.
  async function refreshGates() {
    const g = await api(`/api/runs/${enc}/gates`);
    const key = JSON.stringify([g.note, g.records.length, g.records.length && g.records[g.records.length - 1].time]);
    if (key === st.gatesKey) return;
    st.gatesKey = key;
    const skipped = g.run_gates && g.run_gates.skipped;
    $("#gates-note").innerHTML = `<div class="notice ${skipped ? "bad" : "info"}" id="gates-verdict">${esc(g.note)}${g.ledger ? ` Ledger: <code>${esc(g.ledger)}</code> in the runs folder.` : ""}</div>`;
    // Seven significant digits: a cosine's distance from 1 is the figure.
    const value = (x) => (!isNum(x) ? "—" : x !== 0 && Math.abs(x) < 1e-3 ? x.toExponential(2) : String(+x.toPrecision(7)));
    const figure = (f) => `<tr class="${f.holds ? "" : "miss"}"><td>${esc(f.name)}</td><td class="num">${value(f.value)}</td><td class="num">${esc(f.threshold)}</td><td>${f.holds ? "holds" : "<b>missed</b>"}</td></tr>`;
    $("#gates-list").innerHTML = g.records.map((r) => `<li data-gate="${esc(r.gate)}" data-passed="${r.passed}" data-for-run="${r.for_this_run}">
      <div class="gate-head">${badge(r.passed ? "passed" : "failed")} <b>${esc(r.gate)}</b> <span class="muted">on the ${esc(r.device)}${r.gpu ? ` (${esc(r.gpu)})` : ""} · batch ${int(r.batch)} · seed ${int(r.seed)} · build <span class="sha" title="${esc(r.build)}">${esc(String(r.build).slice(0, 12))}…</span>${r.commit ? ` (commit ${esc(String(r.commit).slice(0, 10))})` : ""} · ${when(r.time)}</span>${r.for_this_run ? ` <span class="badge plain">this run's build</span>` : ""}</div>
      ${(r.cases || []).map((c) => `<div class="gate-case"><div class="muted">${esc(c.weights)} weights: ${c.passed ? "passed" : "<b>failed</b>"}</div>
        <table class="figures"><thead><tr><th>Figure</th><th class="num">Value</th><th class="num">Threshold</th><th></th></tr></thead><tbody>${(c.figures || []).map(figure).join("")}</tbody></table>
        ${(c.evidence || []).map((e) => `<div class="evidence">${esc(e)}</div>`).join("")}</div>`).join("")}</li>`).join("")
      || `<li class="muted">No gate record for ${esc(g.system || "this system")} in this runs folder: \`alpha check all ${esc(String(g.system || "SYSTEM").toLowerCase())} --device cuda --runs DIR\` writes them.</li>`;
  }

  // The cost curves: this run's scored checkpoints and every ticked baseline's.
  async function refreshCurve() {
    const runs = await api("/api/runs");
    const others = runs.runs.filter((r) => r.name !== name).map((r) => r.name);
    if (others.join("|") !== st.others) {
      st.others = others.join("|");
      $("#curve-pick").innerHTML = others.length
        ? `<span class="muted" style="font-size:13px">baselines:</span> ${others.map((o) => `<label class="pick"><input type="checkbox" data-baseline="${esc(o)}" ${st.baselines.has(o) ? "checked" : ""}> ${esc(o)}</label>`).join(" ")}`
        : `<span class="muted" style="font-size:13px">no other run to compare in this folder</span>`;
      for (const box of document.querySelectorAll("#curve-pick input")) {
        box.onchange = () => { const b = box.getAttribute("data-baseline"); if (box.checked) st.baselines.add(b); else st.baselines.delete(b); st.curveKey = ""; refreshCurve(); };
      }
    }
    const picked = [...st.baselines].filter((b) => others.includes(b));
    const curves = await Promise.all([name, ...picked].map((n) => api(`/api/runs/${encodeURIComponent(n)}/curve`).catch(() => ({ name: n, points: [] }))));
    const key = JSON.stringify(curves.map((c) => [c.name, c.points.length, c.points.length && c.points[c.points.length - 1].step]));
    if (key === st.curveKey) return;
    st.curveKey = key;
    // The line each run now continues (a resume from an earlier checkpoint leaves rows behind).
    const line = (pts) => { const keep = currentLine(pts.map((p) => p.step)); return pts.filter((_, i) => keep[i]); };
    const mine = line(curves[0].points);
    const palette = [COLORS.b, COLORS.c, COLORS.d, COLORS.e, COLORS.f];
    const seriesFor = (x, scale) => {
      const at = (p) => (isNum(p[x]) ? p[x] * scale : null);
      const own = mine.filter((p) => isNum(at(p)) && isNum(p.bpb));
      const out = [
        { label: name, type: "line", color: COLORS.a, data: own.map((p) => [at(p), p.bpb]) },
        { label: "±2 standard errors", type: "band", color: COLORS.a, data: own.filter((p) => isNum(p.bpb_se)).map((p) => [at(p), p.bpb - 2 * p.bpb_se, p.bpb + 2 * p.bpb_se]) },
        { label: "scored checkpoints", type: "dots", color: COLORS.a, data: own.map((p) => [at(p), p.bpb]), noValue: true },
      ];
      curves.slice(1).forEach((c, i) => {
        const pts = line(c.points).filter((p) => isNum(at(p)) && isNum(p.bpb));
        out.push({ label: c.name, type: "line", color: palette[i % palette.length], data: pts.map((p) => [at(p), p.bpb]), dash: "5 3" });
      });
      return out;
    };
    draw("chart-curve-time", { height: 260, xLabel: "training seconds from the first step", xName: "s", yLabel: "bits per byte", count: 0, empty: "No scored checkpoint yet", series: seriesFor("device_s", 1) });
    const anyEnergy = curves.some((c) => c.points.some((p) => isNum(p.energy_j)));
    draw("chart-curve-energy", { height: 260, xLabel: "GPU energy, kJ", xName: "kJ", yLabel: "bits per byte", count: 0, empty: anyEnergy ? "No scored checkpoint with energy yet" : "No energy recorded: NVML measures a GPU's joules, and these runs trained on the CPU", series: seriesFor("energy_j", 1e-3) });
    // What each curve scores: the same bytes only where a run says it scored another's.
    const scored = (c) => (c.heldout ? `held-out ${esc(c.heldout)}` : "its own data's held-out windows");
    $("#curve-heldout").innerHTML = curves.length > 1 || curves[0].heldout
      ? `Scored on: ${curves.map((c) => `<b>${esc(c.name)}</b> ${scored(c)}`).join("; ")}.` : "";
    const base = curves[1] ? line(curves[1].points).filter((p) => isNum(p.device_s)) : [];
    const nearest = (cost) => base.reduce((best, p) => (!best || Math.abs(p.device_s - cost) < Math.abs(best.device_s - cost) ? p : best), null);
    const text = (p) => (p && p.sample !== null && p.sample !== undefined ? `<div class="continuation"><span class="prompt">${esc(p.sample_prompt || "")}</span>${esc(p.sample)}</div>` : `<span class="muted">no sample recorded</span>`);
    $("#samples-table tbody").innerHTML = mine.slice().reverse().map((p) => {
      const b = isNum(p.device_s) ? nearest(p.device_s) : null;
      return `<tr data-step="${p.step}"><td class="num">${int(p.step)}</td><td class="num">${fmt(p.device_s, 2)}</td><td class="num">${fmt(p.bpb, 4)}${isNum(p.bpb_se) ? ` <span class="muted">± ${fmt(p.bpb_se, 4)}</span>` : ""}</td><td class="sample">${text(p)}</td>
        <td class="sample">${b ? `<div class="muted">${esc(curves[1].name)} · step ${int(b.step)} · ${fmt(b.device_s, 2)} s · ${fmt(b.bpb, 4)} bits/byte</div>${text(b)}` : `<span class="muted">${curves[1] ? "no scored checkpoint" : "tick a baseline above"}</span>`}</td></tr>`;
    }).join("") || `<tr><td colspan="5" class="muted">No scored checkpoint yet: checkpoints are scored on held-out text when the run has --heldout-windows above 0.</td></tr>`;
  }

  // The system's model views: re-read when the lineage changes (a new checkpoint to read).
  async function refreshViews() {
    const v = await api(`/api/runs/${enc}/views`);
    const key = JSON.stringify(v.views.map((x) => [x.id, (x.checkpoints || []).map((c) => c.sha256)]));
    if (key === st.viewsKey) return;
    st.viewsKey = key;
    $("#model-card").hidden = !v.views.length;
    const host = $("#model-views");
    host.innerHTML = v.views.map((x) => `<div class="model-view" id="view-${esc(x.id)}" data-view="${esc(x.id)}" data-kind="${esc(x.kind)}"><h3>${esc(x.title)}</h3><p class="sub">${esc(x.about)}</p><div class="view-body"></div></div>`).join("");
    for (const x of v.views) {
      const body = $(`#view-${CSS.escape(x.id)} .view-body`);
      if (x.kind === "table") body.innerHTML = viewTable(x.table);
      else if (x.kind === "points") drawConstellation(body, x.points);
      else drawTracked(body, x);
    }
  }

  function viewTable(t) {
    const num = (c) => /^-?[0-9.]+%?$/.test(c);
    return `<div class="scroll" style="max-height:420px"><table class="view-table"><thead><tr>${t.columns.map((c) => `<th>${esc(c)}</th>`).join("")}</tr></thead><tbody>${t.rows.map((r) => `<tr class="${String(r[0]).startsWith("all ") ? "total" : ""}">${r.map((c) => `<td class="${num(c) ? "num" : ""}">${/^[0-9]+$/.test(c) ? int(+c) : esc(c)}</td>`).join("")}</tr>`).join("")}</tbody></table></div>`;
  }

  // A tracked view: each series against the step, over the checkpoints of the line the run now continues.
  function drawTracked(body, x) {
    const keep = currentLine(x.checkpoints.map((c) => c.step));
    const rows = x.checkpoints.filter((_, i) => keep[i]);
    const ok = rows.filter((c) => c.series);
    const errors = rows.filter((c) => c.error);
    const palette = [COLORS.a, COLORS.b, COLORS.c, COLORS.d, COLORS.e, "#2f9e44", "#e8590c", "#5f3dc4"];
    const names = ok.length ? ok[0].series.map((s) => s.name) : [];
    body.innerHTML = (errors.length ? `<div class="notice bad">${errors.map((c) => `step ${int(c.step)}: ${esc(c.error)}`).join("<br>")}</div>` : "")
      + (ok.length ? "" : `<p class="muted">No kept checkpoint to read yet.</p>`)
      + names.map((n, k) => `<div class="view-series" data-series="${esc(n)}"><div id="view-${esc(x.id)}-${k}"></div><div class="view-extra"></div></div>`).join("");
    names.forEach((n, k) => {
      const at = (c) => c.series[k];
      const first = at(ok[0]);
      const id = `view-${x.id}-${k}`;
      if (first.draw === "lines") {
        const series = first.labels.map((label, i) => ({ label, type: "line", color: palette[i % palette.length], data: ok.map((c) => [c.step, at(c).values[i]]) }));
        series.push({ label: "checkpoints", type: "dots", color: "#1b2230", data: ok.map((c) => [c.step, at(c).values[0]]), noValue: true, r: 2.4 });
        draw(id, { height: 260, xLabel: "step", xName: "step", yLabel: `${n} (${first.unit})`, count: 0, series });
        $(`#${CSS.escape(id)} svg`).setAttribute("data-checkpoints", ok.length);
      } else {
        const qs = [[0, "lowest"], [0.1, "10th percentile"], [0.5, "median"], [0.9, "90th percentile"], [1, "highest"]];
        const stats = ok.map((c) => { const v = at(c).values.slice().sort((a, b) => a - b); return qs.map(([q]) => quantile(v, q)); });
        // Values over orders of magnitude (half-lives from a byte to hundreds) are drawn on a log scale.
        const log = stats.every((r) => r.every((v) => v > 0));
        const y = (v) => (log ? Math.log10(v) : v);
        const series = qs.map(([, label], i) => ({ label, type: "line", color: palette[i], data: ok.map((c, j) => [c.step, y(stats[j][i])]), dash: i === 0 || i === 4 ? "5 3" : undefined }));
        draw(id, { height: 260, xLabel: "step", xName: "step", yLabel: `${n} (${first.unit}${log ? ", log scale" : ""})`, count: 2, series, yLog: log, fmtY: log ? (v) => short(Math.pow(10, v)) : short });
        $(`#${CSS.escape(id)} svg`).setAttribute("data-checkpoints", ok.length);
        $(`#${CSS.escape(id)} svg`).setAttribute("data-values", first.values.length);
        const newest = ok[ok.length - 1];
        $(`#${CSS.escape(id)}`).parentElement.querySelector(".view-extra").innerHTML = `<div class="scroll" style="max-height:300px"><table class="view-table"><thead><tr><th class="num">Step</th><th class="num">Values</th>${qs.map(([, l]) => `<th class="num">${esc(l)}</th>`).join("")}</tr></thead><tbody>${ok.map((c, j) => `<tr data-step="${c.step}"><td class="num">${int(c.step)}</td><td class="num">${int(at(c).values.length)}</td>${stats[j].map((v) => `<td class="num">${short(v)}</td>`).join("")}</tr>`).reverse().join("")}</tbody></table></div>
          <p class="muted" style="font-size:13px">At step ${int(newest.step)}: ${spreadList(at(newest))}</p>`;
        if (first.rows) heatMap($(`#${CSS.escape(id)}`).parentElement.querySelector(".view-extra"), ok.map((c) => [c.step, at(c)]), x.id);
      }
    });
  }

  // One checkpoint's values as a grid (a row each of `rows`), coloured on a log scale that is
  // the same at every checkpoint; the slider picks the checkpoint.
  function heatMap(host, byStep, id) {
    const all = byStep.flatMap(([, s]) => s.values).filter((v) => v > 0);
    if (!all.length) return;
    const lo = Math.log(Math.min(...all)), hi = Math.log(Math.max(...all));
    const colour = (v) => { const f = hi > lo ? (Math.log(v) - lo) / (hi - lo) : 0.5; return `hsl(${(230 - 210 * f).toFixed(0)},70%,${(62 - 22 * f).toFixed(0)}%)`; };
    const wrap = el("div", { class: "heat", "data-heat": id });
    wrap.innerHTML = `<label class="pick">Checkpoint <input type="range" min="0" max="${byStep.length - 1}" value="${byStep.length - 1}"> <b class="heat-step"></b></label>
      <span class="muted" style="font-size:12.5px"> colour: ${short(Math.exp(lo))} (blue) to ${short(Math.exp(hi))} (red) ${esc(byStep[0][1].unit)}, log scale</span><div class="heat-grid"></div>`;
    host.appendChild(wrap);
    const paint = (k) => {
      const [step, s] = byStep[k];
      const rows = s.rows.length, cols = s.values.length / rows, cw = 14, ch = 16, left = 70;
      wrap.querySelector(".heat-step").textContent = `step ${int(step)}`;
      wrap.querySelector(".heat-grid").innerHTML = `<svg width="${left + cols * cw}" height="${rows * ch}" data-cells="${s.values.length}">${s.values.map((v, i) => `<rect x="${left + (i % cols) * cw}" y="${Math.floor(i / cols) * ch}" width="${cw - 1}" height="${ch - 1}" fill="${v > 0 ? colour(v) : "#ccc"}"><title>${esc(s.labels[i])}: ${short(v)} ${esc(s.unit)}</title></rect>`).join("")}
        ${s.rows.map((r, j) => `<text x="${left - 6}" y="${j * ch + 12}" text-anchor="end" font-size="11">${esc(r)}</text>`).join("")}</svg>`;
    };
    const slider = wrap.querySelector("input");
    slider.addEventListener("input", () => paint(+slider.value));
    paint(byStep.length - 1);
  }

  function quantile(sorted, q) {
    if (!sorted.length) return null;
    const at = q * (sorted.length - 1), lo = Math.floor(at), hi = Math.ceil(at);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo);
  }
  // The newest checkpoint's shortest and longest values, by label.
  function spreadList(s) {
    const order = s.values.map((v, i) => i).sort((a, b) => s.values[a] - s.values[b]);
    const name = (i) => `${esc(s.labels[i])} ${short(s.values[i])}`;
    return `shortest ${order.slice(0, 3).map(name).join(", ")}; longest ${order.slice(-3).reverse().map(name).join(", ")} (${esc(s.unit)}).`;
  }

  // Labelled points: one small panel a set, each point with the bytes that land on it; bytes
  // typed in the box are ringed where they land.
  function drawConstellation(body, sets) {
    const printable = (b) => (b >= 33 && b <= 126 ? String.fromCharCode(b) : b === 32 ? "␠" : `\\x${b.toString(16).padStart(2, "0")}`);
    body.innerHTML = `<label class="pick">Bytes to find <input id="wire-bytes" value="Diakosmos" style="width:160px"></label>
      <div class="constellation">${sets.map((set, i) => `<div class="panel" data-set="${i}"><div class="muted" style="font-size:12.5px">${esc(set.name)}</div>
        <svg viewBox="-1.6 -1.6 3.2 3.2" width="150" height="150" role="img" aria-label="${esc(set.name)}"><circle cx="0" cy="0" r="1" fill="none" stroke="#d5dae1" stroke-width="0.02"/>
        <line x1="-1.3" x2="1.3" y1="0" y2="0" stroke="#eef1f5" stroke-width="0.02"/><line y1="-1.3" y2="1.3" x1="0" x2="0" stroke="#eef1f5" stroke-width="0.02"/>
        ${set.points.map((p) => `<g><title>${esc(p.bytes.map(printable).join(" "))}</title><circle class="pt" cx="${p.x.toFixed(4)}" cy="${(-p.y).toFixed(4)}" r="0.11" fill="${COLORS.a}" data-bytes="${p.bytes.join(",")}"/>
          <circle class="ring" cx="${p.x.toFixed(4)}" cy="${(-p.y).toFixed(4)}" r="0.2" fill="none" stroke="${COLORS.c}" stroke-width="0.05" visibility="hidden"/>
          <text x="${(p.x * 1.38).toFixed(3)}" y="${(-p.y * 1.38 + 0.08).toFixed(3)}" text-anchor="middle" font-size="0.24">${p.bytes.length}</text></g>`).join("")}</svg>
        <div class="found muted" style="font-size:12px;min-height:1.2em"></div></div>`).join("")}</div>`;
    const mark = () => {
      const typed = new Set([...new TextEncoder().encode($("#wire-bytes").value)]);
      for (const panel of body.querySelectorAll(".panel")) {
        const found = [];
        for (const g of panel.querySelectorAll("g")) {
          const bytes = g.querySelector(".pt").getAttribute("data-bytes").split(",").map(Number);
          const here = bytes.filter((b) => typed.has(b));
          g.querySelector(".ring").setAttribute("visibility", here.length ? "visible" : "hidden");
          if (here.length) found.push(here.map(printable).join(""));
        }
        panel.querySelector(".found").textContent = found.join(" · ");
      }
    };
    $("#wire-bytes").addEventListener("input", mark);
    mark();
  }

  poll(async () => {
    const d = await api(`/api/runs/${enc}`);
    renderHeadline(d);
    $("#runs-dir").textContent = d.runs_dir;
    const [lin, changed] = await Promise.all([api(`/api/runs/${enc}/lineage`), refreshPoints()]);
    const linChanged = renderLineage(lin.rows, lin.health);
    if (changed || linChanged) drawLoss();
    const line = st.cols ? currentLine(st.cols.step) : [];
    const steps = line.filter(Boolean).length;
    const unseenN = st.cols ? st.cols.unseen.filter((u, i) => u && line[i]).length : 0;
    $("#loss-sub").innerHTML = `Mean cross-entropy over each step's ${d.run && d.run.tokens_per_step ? int(d.run.tokens_per_step) + " " : ""}positions, ${int(steps)} steps. The band is the 10th–90th percentile across positions where the trainer records it. ${unseenN && unseenN === steps ? "Every step is scored on a context not yet trained on, before training on it, so the fall is learning, not memorization." : `The first step of each invocation (${int(unseenN)} dots) is scored on a context not yet trained on, so its fall is learning, not memorization.`} Diamonds: held-out loss at checkpoints.${st.vocab ? ` Dashed: ln ${int(st.vocab)}, the loss of a model that knows nothing.` : ""}`;
    if (d.files.invocations.rows !== st.invRows) {
      st.invRows = d.files.invocations.rows;
      const inv = await api(`/api/runs/${enc}/invocations`);
      $("#invocations-table tbody").innerHTML = inv.rows.slice().reverse().map((r) => `<tr><td class="num">${r.k}</td><td>${int(r.first_step)}–${int(r.last_step)}</td><td class="num">${fmt(r.unseen_loss, 4)}</td><td class="num">${fmt(r.last_loss, 4)}</td><td class="num">${fmt(r.wall_s, 2)}</td><td class="num">${fmt(r.device_s, 2)}</td></tr>`).join("")
        || `<tr><td colspan="6" class="muted">No invocation recorded yet.</td></tr>`;
    }
    if (d.files.health && d.files.health.rows !== st.healthRows) {
      st.healthRows = d.files.health.rows;
      renderHealth((await api(`/api/runs/${enc}/health`)).rows);
    }
    await Promise.all([refreshTelemetry(), refreshProfile(d.files.profile.rows), refreshGates(), refreshCurve(), linChanged || st.viewsKey === undefined ? refreshViews() : null]);
    document.body.setAttribute("data-loaded", "1");
  });
}

// ---------- optimizer health ----------
// The latest health step's figures as a table (norms by quantity, the update's ratio to the
// parameters, non-finite counts), and the ratio by tensor over every health step as a heat map:
// the ratio is the step's relative size, the figure whose drift shows a tensor learning too fast
// or stalling.
const HEALTH_ORDER = ["grad", "param", "update", "adam_m", "adam_v", "muon_momentum", "rot_norm0", "rot_ms"];
function healthRatio(t) {
  const u = t.norms.update, p = t.norms.param;
  return isNum(u) && isNum(p) && p > 0 ? u / p : null;
}
function healthBad(t) {
  return Object.values(t.nonfinite || {}).reduce((a, b) => a + b, 0);
}
function renderHealth(rows) {
  if (!rows.length) return;
  const last = rows[rows.length - 1];
  const qs = HEALTH_ORDER.filter((q) => last.tensors.some((t) => q in t.norms));
  $("#health-sub").textContent = `Update ${int(last.step)}: each parameter tensor's L2 norms (gradient before clipping, values and optimizer state after the update, and the update itself), computed on the device, and the count of elements that were NaN or infinite. ${rows.length} health steps recorded.`;
  $("#health-table thead").innerHTML = `<tr><th>Tensor</th><th class="num">Elements</th>${qs.map((q) => `<th class="num">‖${esc(q)}‖</th>`).join("")}<th class="num">update ÷ param</th><th class="num">Non-finite</th></tr>`;
  $("#health-table tbody").innerHTML = last.tensors.map((t) => {
    const bad = healthBad(t);
    const cells = qs.map((q) => `<td class="num">${q in t.norms ? (isNum(t.norms[q]) ? sig(t.norms[q], 4) : "non-finite") : ""}</td>`).join("");
    const which = Object.entries(t.nonfinite || {}).filter(([, n]) => n > 0).map(([q, n]) => `${q} ${int(n)}`).join(", ");
    return `<tr${bad ? ' class="bad"' : ""}><td>${esc(t.tensor)}</td><td class="num">${int(t.numel)}</td>${cells}<td class="num">${sig(healthRatio(t), 3)}</td><td class="num">${bad ? esc(which) : "0"}</td></tr>`;
  }).join("");
  const logs = rows.flatMap((r) => r.tensors.map(healthRatio)).filter((x) => isNum(x) && x > 0).map(Math.log10);
  const lo = Math.min(...logs), hi = Math.max(...logs);
  const colour = (x) => {
    if (!isNum(x) || x <= 0) return "#eee";
    const f = hi > lo ? (Math.log10(x) - lo) / (hi - lo) : 0.5;
    return `hsl(${Math.round(240 - 200 * f)}, 70%, ${Math.round(88 - 40 * f)}%)`;
  };
  const head = `<tr><th>Tensor</th>${rows.map((r) => `<th class="num">${int(r.step)}</th>`).join("")}</tr>`;
  const body = last.tensors.map((t, i) => `<tr><td>${esc(t.tensor)}</td>${rows.map((r) => {
    const u = r.tensors.find((x) => x.tensor === t.tensor) || r.tensors[i];
    if (!u) return "<td></td>";
    const x = healthRatio(u), bad = healthBad(u);
    const fill = bad ? "#d33" : colour(x);
    return `<td class="heat" style="background:${fill}" title="${esc(t.tensor)} at update ${int(r.step)}: ${isNum(x) ? sig(x, 3) : "—"}${bad ? `, ${int(bad)} non-finite` : ""}"></td>`;
  }).join("")}</tr>`).join("");
  const scale = logs.length ? `<p class="sub">Colour from blue (10^${fmt(lo, 2)}) to red-orange (10^${fmt(hi, 2)}).</p>` : "";
  $("#health-heat").innerHTML = `<table id="health-heat-table"><thead>${head}</thead><tbody>${body}</tbody></table>${scale}`;
}

// ---------- the systems page ----------
function systemsPage() {
  $("#main").innerHTML = `
    <div class="kicker">Systems</div>
    <h1>Learning systems and where they run</h1>
    <p class="lede">A system is a model, a learner, a run policy and a pairing with a device, compiled whole into one executable. Model code is hardware-independent; the pairing chooses the device. Where each system runs is read from this runs folder's records — its gate ledgers and its runs — and each links to its recorded runs; the design's own note is shown apart, as a claim.</p>
    <div class="systems" id="systems"></div>
    <div class="card"><h2>Which system runs where</h2><p class="sub">Each device a system is shown on comes from the records in this runs folder: the CPU (the reference every gate compares with), and a GPU only where a gate record or a run puts it. Gate standing is this server's build's where it was judged, else the newest judged build's.</p>
    <table id="systems-table"><thead><tr><th>System</th><th class="num">Parameters</th><th>Device</th><th>Recorded</th><th class="num">Best held-out bits/byte</th><th class="num">Fastest tokens/s</th><th>Runs</th></tr></thead><tbody></tbody></table></div>`;
  const runLinks = (runs) => runs.map((r) => `<a href="/runs/${encodeURIComponent(r.name)}">${esc(r.name)}</a> ${badge(r.state)}`).join(" ");
  // What the records show: a GPU device whose every gate passed and that finished a run trains
  // there; otherwise the badge says what is missing.
  const recorded = (s) => {
    const gpu = s.devices.filter((d) => d.device !== "cpu");
    const gated = gpu.filter((d) => d.gates_missing.length === 0);
    if (gated.some((d) => d.finished > 0)) return ["trains", `trains on ${gated.filter((d) => d.finished > 0).map((d) => d.device).join(", ")}, gated`];
    if (gated.length) return ["trains", `gated on ${gated.map((d) => d.device).join(", ")}; no finished run there`];
    if (gpu.some((d) => d.runs > 0)) return ["develop", "ran on a GPU without every gate passed"];
    const cpu = s.devices.find((d) => d.device === "cpu");
    return cpu && cpu.finished > 0 ? ["plain", "trained on the CPU only"] : ["plain", "no recorded run"];
  };
  poll(async () => {
    const d = await api("/api/systems");
    $("#systems").innerHTML = d.systems.map((s) => {
      const [cls, words] = recorded(s);
      return `<div class="system" data-system="${esc(s.name)}">
      <div><span class="badge ${cls}" data-recorded>${esc(words)}</span></div>
      <h2>${esc(s.name)}</h2><p>${esc(s.description)}</p>
      <div class="meta"><b>${int(s.parameters)}</b> parameters</div>
      ${s.devices.map((dv) => `<div class="meta" data-device="${esc(dv.device)}"><b>${esc(dv.device)}</b>: ${esc(dv.state)}</div>`).join("")}
      <div class="meta">${s.runs.length ? `Runs: ${runLinks(s.runs)}` : "No recorded run in this folder."}</div></div>`;
    }).join("") || `<p class="muted">This server was started without a catalogue.</p>`;
    $("#systems-table tbody").innerHTML = d.systems.map((s) => s.devices.map((dv, i) => `<tr data-system="${esc(s.name)}" data-device="${esc(dv.device)}">
      <td>${i === 0 ? `<b>${esc(s.name)}</b>` : ""}</td><td class="num">${i === 0 ? int(s.parameters) : ""}</td><td>${esc(dv.device)}</td><td>${esc(dv.state)}</td>
      <td class="num">${isNum(dv.best_bpb) ? `${fmt(dv.best_bpb, 4)} <span class="muted">${esc(dv.best_run)}</span>` : "—"}</td><td class="num">${int(dv.best_tokens_per_s)}</td>
      <td>${i === 0 && s.runs.length ? runLinks(s.runs) : i === 0 ? "—" : ""}</td></tr>`).join("")).join("");
  });
}

// ---------- start ----------
(function start() {
  const page = document.body.getAttribute("data-page");
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("here", a.getAttribute("data-nav") === (page === "run" ? "runs" : page));
  if (page === "run") runPage(document.body.getAttribute("data-run"));
  else if (page === "systems") systemsPage();
  else runsPage();
})();
