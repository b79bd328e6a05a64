// kadmit dashboard: polls api/summary and api/denials (relative URLs, so it
// also works behind kubectl proxy) and draws everything itself with SVG.
// Data is only ever inserted as text (textContent), never as HTML: denial
// messages and object names come from the reviewed objects.
"use strict";

const POLL_MS = 5000;
const SVG_NS = "http://www.w3.org/2000/svg";
// Okabe-Ito, readable for the common colour-vision deficiencies; grey last
// for "other rules".
const COLORS = ["#D55E00", "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#9CA3AF"];

let lastSummary = null;

// The operations token, when kadmit asks for one (--ops-token-file). Kept in
// this tab's sessionStorage only: gone when the tab closes, never in a URL
// (histories, proxy logs, Referer) nor in a cookie (which another site could
// make the browser send).
const TOKEN_KEY = "kadmit-ops-token";
let pollTimer = null;

class Unauthorized extends Error {}

function $(id) {
  return document.getElementById(id);
}

function el(tag, props, children) {
  const node = document.createElement(tag);
  if (props) {
    for (const [key, value] of Object.entries(props)) {
      if (key === "text") node.textContent = value;
      else if (key === "className") node.className = value;
      // Through CSSOM: the Content-Security-Policy refuses style attributes.
      else if (key === "style") Object.assign(node.style, value);
      else node.setAttribute(key, value);
    }
  }
  for (const child of children || []) {
    node.append(child);
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function setText(id, text) {
  $(id).textContent = text;
}

function fmtCount(n) {
  if (n === null || n === undefined || !isFinite(n)) return "–";
  return Math.round(n).toLocaleString("en-US");
}

function fmtRate(n) {
  if (n === null || n === undefined || !isFinite(n)) return "–";
  if (n === 0) return "0";
  if (n >= 100) return Math.round(n).toLocaleString("en-US");
  if (n >= 10) return n.toFixed(1);
  if (n >= 0.01) return n.toFixed(2);
  return "<0.01";
}

function plural(n, word) {
  return `${fmtCount(n)} ${word}${Math.round(n) === 1 ? "" : "s"}`;
}

function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "–";
  if (seconds === 0) return "0";
  if (seconds < 0.001) return (seconds * 1e6).toFixed(seconds < 1e-4 ? 1 : 0) + " µs";
  if (seconds < 1) return (seconds * 1e3).toFixed(seconds < 0.01 ? 2 : 1) + " ms";
  return seconds.toFixed(2) + " s";
}

function fmtClock(unixSeconds) {
  const date = new Date(unixSeconds * 1000);
  return date.toLocaleTimeString("en-GB", { hour12: false });
}

function fmtTime(rfc3339) {
  const date = new Date(rfc3339);
  return isNaN(date) ? rfc3339 : date.toLocaleTimeString("en-GB", { hour12: false });
}

function ruleName(row) {
  return row.ruleSet ? row.ruleSet + "/" + row.rule : row.rule;
}

function ruleCell(row) {
  const cell = el("td", { title: ruleName(row) });
  cell.append(el("div", { className: "rule-name", text: row.rule }));
  if (row.ruleSet) cell.append(el("div", { className: "rule-set", text: row.ruleSet }));
  return cell;
}

function fillTable(tableId, emptyId, rows, makeRow) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren(...rows.map(makeRow));
  $(emptyId).hidden = rows.length > 0;
  $(tableId).hidden = rows.length === 0;
}

// Rounds up to 1, 2 or 5 times a power of ten.
function niceCeil(value) {
  if (value <= 0) return 1;
  const power = Math.pow(10, Math.floor(Math.log10(value)));
  for (const step of [1, 2, 5, 10]) {
    if (value <= step * power) return step * power;
  }
  return 10 * power;
}

// The shortest time span a chart shows, so that the first minutes after
// start are narrow bars at the right rather than one bar across the chart.
const MIN_SPAN_SECONDS = 300;
// The narrowest bar or step drawn, in pixels.
const MIN_MARK_PX = 3;

function chartFrame(container, left) {
  const width = Math.max(container.clientWidth, 120);
  const height = Math.max(container.clientHeight, 60);
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height });
  const frame = { root, width, height, left, right: 8, top: 8, bottom: 18 };
  frame.plotWidth = width - frame.left - frame.right;
  frame.plotHeight = height - frame.top - frame.bottom;
  return frame;
}

// Interval i of a series runs from starts[i] to times[i].
function intervals(series) {
  const times = series.times || [];
  const starts = times.map((_, i) => (i === 0 ? series.start : times[i - 1]));
  return { times, starts };
}

// Maps Unix seconds onto the plot: the last MIN_SPAN_SECONDS at least,
// ending at the newest interval.
function timeScale(frame, series) {
  const times = series.times;
  const end = times[times.length - 1];
  const begin = Math.min(series.start, end - MIN_SPAN_SECONDS);
  const xOf = (t) => frame.left + (frame.plotWidth * (t - begin)) / (end - begin);
  return { begin, end, xOf };
}

function emptyChart(container, message) {
  const frame = chartFrame(container, 0);
  frame.root.append(
    svg("text", { x: frame.width / 2, y: frame.height / 2, "text-anchor": "middle", class: "empty-text" }, message)
  );
  container.replaceChildren(frame.root);
}

function yAxis(frame, max, format) {
  for (const fraction of [0, 0.5, 1]) {
    const y = frame.top + frame.plotHeight * (1 - fraction);
    frame.root.append(svg("line", { x1: frame.left, x2: frame.width - frame.right, y1: y, y2: y, class: "grid" }));
    frame.root.append(
      svg("text", { x: frame.left - 4, y: y + 4, "text-anchor": "end" }, format(max * fraction))
    );
  }
}

function xLabels(frame, scale) {
  const middle = (scale.begin + scale.end) / 2;
  for (const [t, anchor] of [[scale.begin, "start"], [middle, "middle"], [scale.end, "end"]]) {
    frame.root.append(svg("text", { x: scale.xOf(t), y: frame.height - 4, "text-anchor": anchor }, fmtClock(t)));
  }
}

function spanText(series) {
  if (!series.times || series.times.length === 0) return "";
  const span = series.times[series.times.length - 1] - series.start;
  if (span >= 120) return `last ${Math.round(span / 60)} min`;
  return `last ${Math.round(span)} s`;
}

// Stacked bars: one bar per interval, one segment per rule.
function drawRejections(series) {
  const container = $("rejections-chart");
  const legend = $("rejections-legend");
  const rows = series.rejections || [];
  const { times, starts } = intervals(series);
  const totals = times.map((_, i) => rows.reduce((sum, row) => sum + (row.counts[i] || 0), 0));
  legend.replaceChildren(
    ...rows.map((row, i) =>
      el("li", {}, [
        el("span", { className: "swatch", style: { background: COLORS[Math.min(i, COLORS.length - 1)] } }),
        el("span", { text: ruleName(row) }),
      ])
    )
  );
  setText("chart-span", spanText(series));
  if (rows.length === 0 || totals.every((t) => t === 0)) {
    emptyChart(container, "No rejections in this period");
    return;
  }
  const max = niceCeil(Math.max(...totals));
  const frame = chartFrame(container, 36);
  const scale = timeScale(frame, series);
  yAxis(frame, max, (v) => (Number.isInteger(v) ? String(v) : v.toFixed(1)));
  times.forEach((time, i) => {
    const x0 = scale.xOf(starts[i]);
    const x1 = scale.xOf(time);
    // A pixel of gap between bars once they are wide enough to afford it;
    // at least MIN_MARK_PX wide so a short first interval stays visible.
    const width = Math.max(MIN_MARK_PX, x1 - x0 - (x1 - x0 > 4 ? 1 : 0));
    let y = frame.top + frame.plotHeight;
    rows.forEach((row, r) => {
      const count = row.counts[i] || 0;
      if (count <= 0) return;
      const height = (count / max) * frame.plotHeight;
      y -= height;
      const rect = svg("rect", {
        x: x1 - width,
        y,
        width,
        height: Math.max(height, 0.5),
        fill: COLORS[Math.min(r, COLORS.length - 1)],
      });
      rect.append(
        svg("title", {}, `${ruleName(row)}: ${fmtCount(count)} from ${fmtClock(starts[i])} to ${fmtClock(time)}`)
      );
      frame.root.append(rect);
    });
  });
  xLabels(frame, scale);
  container.replaceChildren(frame.root);
}

// Step lines over time (each value holds for its interval); `lines` is
// [{values, color}], and a null value leaves a gap.
function drawSteps(container, series, lines, format, emptyMessage) {
  const { times, starts } = intervals(series);
  const all = lines.flatMap((line) => line.values).filter((v) => v !== null && isFinite(v));
  if (times.length === 0 || all.length === 0) {
    emptyChart(container, emptyMessage);
    return;
  }
  const max = niceCeil(Math.max(...all) || 1);
  const frame = chartFrame(container, 52);
  const scale = timeScale(frame, series);
  yAxis(frame, max, format);
  const yOf = (v) => frame.top + frame.plotHeight * (1 - v / max);
  for (const line of lines) {
    let path = "";
    let pen = "M";
    line.values.forEach((value, i) => {
      if (value === null || !isFinite(value)) {
        pen = "M";
        return;
      }
      const y = yOf(value).toFixed(1);
      const x1 = scale.xOf(times[i]);
      const x0 = Math.min(scale.xOf(starts[i]), x1 - MIN_MARK_PX);
      path += `${pen}${x0.toFixed(1)},${y} L${x1.toFixed(1)},${y} `;
      pen = "L";
    });
    frame.root.append(svg("path", { d: path, fill: "none", stroke: line.color, "stroke-width": 1.8 }));
  }
  xLabels(frame, scale);
  container.replaceChildren(frame.root);
}

function renderPlan(plan) {
  setText("plan-generation", String(plan.generation));
  setText("plan-rule-sets", fmtCount(plan.ruleSets));
  setText("plan-rules", fmtCount(plan.rules));
  setText("plan-reloaded", plan.lastSuccess ? "loaded " + fmtTime(plan.lastSuccess) : "");
  const shadow = plan.lastShadow;
  setText("plan-shadow", shadow
    ? "last rule change: " + fmtCount(shadow.changed) + " of " + fmtCount(shadow.reviews) +
      " recent reviews decided differently (" + fmtCount(shadow.newlyDenied) + " newly denied)"
    : "");
  const state = $("plan-state");
  if (plan.lastError) {
    state.textContent = plan.ready ? "reload failing" : "not ready";
    state.className = "pill failing";
  } else {
    state.textContent = plan.ready ? "ready" : "not ready";
    state.className = plan.ready ? "pill ready" : "pill failing";
  }
  const banner = $("reload-error");
  banner.hidden = !plan.lastError;
  if (plan.lastError) {
    setText("reload-error-when", plan.lastFailure ? "at " + fmtTime(plan.lastFailure) : "");
    setText("reload-error-generation", String(plan.generation));
    setText("reload-error-text", plan.lastError);
  }
}

function renderTiles(summary) {
  const current = summary.current;
  const totals = summary.totals;
  const latency = current.latency;
  setText("stat-rate", fmtRate(current.reviewsPerSecond));
  setText(
    "stat-rate-sub",
    current.windowSeconds ? `over ${Math.round(current.windowSeconds)} s` : "no earlier sample yet"
  );
  setText("stat-rejection-rate", fmtRate(current.rejectionsPerSecond));
  setText("stat-rejection-sub", `${fmtCount(totals.rejections)} since start`);
  setText("stat-p50", fmtDuration(latency.p50));
  setText("stat-p99", fmtDuration(latency.p99));
  setText("stat-p90", "p90 " + fmtDuration(latency.p90));
  setText(
    "stat-latency-sub",
    `${plural(latency.reviews, "review")}${latency.sinceStart ? " since start" : ""}`
  );
  setText("stat-reviews", fmtCount(totals.reviews));
  setText(
    "stat-decisions",
    `${fmtCount(totals.denied)} denied · ${fmtCount(totals.patched)} patched`
  );
  setText("stat-warnings", fmtCount(totals.warnings));
  setText("stat-warnings-sub", `${plural(totals.audits, "audit")} · ${plural(totals.mutations, "mutation")}`);
  setText("stat-errors", `${fmtCount(totals.badRequests)} / ${fmtCount(totals.reviewErrors)}`);
}

function renderTables(summary) {
  const rejecting = summary.rules.filter((row) => row.rejections > 0).slice(0, 10);
  const top = rejecting.length ? rejecting[0].rejections : 1;
  fillTable("top-rules", "top-rules-empty", rejecting, (row) =>
    el("tr", { "data-rule": ruleName(row) }, [
      ruleCell(row),
      el("td", { className: "num count", text: fmtCount(row.rejections) }),
      el("td", {}, [el("div", { className: "bar", style: { width: `${(100 * row.rejections) / top}%` } })]),
    ])
  );
  const others = summary.rules
    .filter((row) => row.warnings + row.audits + row.mutations > 0)
    .sort((a, b) => b.warnings - a.warnings || b.audits - a.audits || b.mutations - a.mutations)
    .slice(0, 10);
  fillTable("other-rules", "other-rules-empty", others, (row) =>
    el("tr", { "data-rule": ruleName(row) }, [
      ruleCell(row),
      el("td", { className: "num warned", text: fmtCount(row.warnings) }),
      el("td", { className: "num audited", text: fmtCount(row.audits) }),
      el("td", { className: "num mutated", text: fmtCount(row.mutations) }),
    ])
  );
  fillTable("targets", "targets-empty", summary.targets.slice(0, 10), (row) =>
    el("tr", {}, [
      el("td", { text: row.operation }),
      el("td", { text: row.resource }),
      el("td", { className: "num", text: fmtCount(row.reviews) }),
      el("td", { className: "num", text: fmtCount(row.denied) }),
    ])
  );
}

function renderCharts(summary) {
  const series = summary.series;
  drawRejections(series);
  drawSteps(
    $("rate-chart"),
    series,
    [{ values: series.reviewsPerSecond, color: "#2563eb" }],
    fmtRate,
    "Waiting for a second sample"
  );
  drawSteps(
    $("latency-chart"),
    series,
    [
      { values: series.latencyP50, color: "#2563eb" },
      { values: series.latencyP99, color: "#c2410c" },
    ],
    fmtDuration,
    "No reviews in this period"
  );
}

function objectText(denial) {
  let name = denial.name || (denial.generateName ? denial.generateName + "*" : "(unnamed)");
  if (denial.namespace) name = denial.namespace + "/" + name;
  return name;
}

function renderDenials(snapshot) {
  setText(
    "denials-count",
    snapshot.capacity === 0
      ? "(recording is off: --denials-capacity 0)"
      : `${fmtCount(snapshot.denials.length)} shown of ${fmtCount(snapshot.recorded)} since start (keeps ${fmtCount(snapshot.capacity)})`
  );
  fillTable("denials", "denials-empty", snapshot.denials, (denial) => {
    const rule = el("td", { title: `${denial.ruleSet}/${denial.rule}` }, [
      el("div", {}, [
        el("span", { className: "rule-name", text: denial.rule }),
        el("span", { className: "code", text: String(denial.code) }),
      ]),
      el("div", { className: "rule-set", text: denial.ruleSet }),
    ]);
    const object = el("td", { className: "object" }, [
      el("div", { text: objectText(denial) }),
      el("div", { className: "rule-set", text: denial.resource }),
    ]);
    const operation = el("td", { text: denial.operation });
    if (denial.dryRun) operation.append(el("span", { className: "tag", text: "dry run" }));
    return el("tr", { "data-uid": denial.uid }, [
      el("td", { className: "time", text: fmtTime(denial.time), title: denial.time }),
      rule,
      operation,
      object,
      el("td", { text: denial.user }),
      el("td", { className: "message", text: denial.message }),
    ]);
  });
}

function render(summary, denials) {
  lastSummary = summary;
  renderPlan(summary.plan);
  renderTiles(summary);
  renderTables(summary);
  renderCharts(summary);
  renderDenials(denials);
  setText("updated", "updated " + fmtTime(summary.time));
  document.body.dataset.loaded = "true";
}

async function fetchJson(path) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, { cache: "no-store", headers });
  if (response.status === 401) throw new Unauthorized(path);
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

function askForToken() {
  const hadToken = sessionStorage.getItem(TOKEN_KEY) !== null;
  sessionStorage.removeItem(TOKEN_KEY);
  setText("token-error", hadToken ? "kadmit refused that token." : "");
  setText("updated", "waiting for the operations token");
  $("token-form").hidden = false;
  $("token-input").focus();
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const token = $("token-input").value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token-input").value = "";
  $("token-form").hidden = true;
  clearTimeout(pollTimer);
  poll();
});

async function poll() {
  try {
    const [summary, denials] = await Promise.all([fetchJson("api/summary"), fetchJson("api/denials")]);
    render(summary, denials);
  } catch (error) {
    if (error instanceof Unauthorized) {
      // No polling until a token is entered: nothing to gain from 401s.
      askForToken();
      return;
    }
    setText("updated", `cannot reach kadmit (${error.message}); retrying`);
    const state = $("plan-state");
    state.textContent = "stale";
    state.className = "pill stale";
  }
  pollTimer = setTimeout(poll, POLL_MS);
}

let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => lastSummary && renderCharts(lastSummary), 150);
});

poll();
