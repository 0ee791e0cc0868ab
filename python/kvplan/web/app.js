// kvplan's page: a form over the JSON API of `kvplan serve` (python/kvplan/serve.py). Every number shown comes from
// an answer of /plan, which is `kvplan --json`; this script only formats bytes as GiB and scales them to pixels.
"use strict";

const GiB = 2 ** 30;
const CHART_POINTS = 8;  // contexts per K/V pair on the chart: each one is a /plan of that pinned configuration
const CHART_PAIRS = 4;   // the first distinct K/V pairs of the ranked options
const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

const $ = (id) => document.getElementById(id);
const gib = (bytes) => (bytes / GiB).toFixed(2);

function el(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== "") node.textContent = text;
  return node;
}

function svg(tag, attrs = {}, text = "") {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== "") node.textContent = text;
  return node;
}

// GET an API path; resolves to {status, body} with the parsed JSON (400 bodies are the CLI's error object).
async function api(path, params) {
  const query = params ? "?" + params.toString() : "";
  const response = await fetch(path + query, {headers: {Accept: "application/json"}});
  return {status: response.status, body: await response.json()};
}

async function loadCatalog() {
  const [gpus, models, engines, tasks] = await Promise.all(
    ["gpus", "models", "engines", "tasks"].map((path) => api(path)));
  for (const g of gpus.body.gpus)
    $("gpu-list").append(el("option", {value: g.id}, `${g.name} (${(g.usable_mib / 1024).toFixed(0)} GiB)`));
  for (const m of models.body.models) {
    $("model-list").append(el("option", {value: m.id}, `${m.name}, ${(m.params / 1e9).toFixed(1)}B`));
    for (const alias of m.aliases) $("model-list").append(el("option", {value: alias}, m.name));
  }
  for (const t of tasks.body.tasks) $("task").append(el("option", {value: t.id}, t.name));
  for (const e of engines.body.engines) $("engine").append(el("option", {value: e.id}, `${e.name} (${e.version})`));
}

// The form as the CLI's flags: one gpu per GPU field, then model, task, engine and a context if given.
function formParams() {
  const params = new URLSearchParams();
  for (const input of document.querySelectorAll("#gpus input.gpu"))
    if (input.value.trim()) params.append("gpu", input.value.trim());
  params.append("model", $("model").value.trim());
  params.append("task", $("task").value);
  params.append("engine", $("engine").value);
  if ($("ctx-size").value.trim()) params.append("ctx-size", $("ctx-size").value.trim());
  return params;
}

function showError(body) {
  const e = body.error;
  $("status").textContent = e ? e.message : "the server answered without a plan";
  $("status").className = "error";
  $("results").hidden = true;
  document.body.dataset.state = "error";
}

function risk(option) {
  const q = option.quality;
  return `${q.risk} (~${(q.expected_loss * 100).toFixed(1)}%)${q.extrapolated ? "*" : ""}`;
}

function fillTable(plan) {
  const body = $("options").querySelector("tbody");
  body.replaceChildren();
  for (const o of plan.options) {
    const m = o.memory;
    const cells = [o.rank, o.weights, o.ctx_size, o.cache_type_k, o.cache_type_v, o.flash_attn, gib(m.weights_bytes),
      gib(m.k_cache_bytes), gib(m.v_cache_bytes), gib(m.total_bytes), gib(m.headroom_bytes), risk(o), o.reason];
    const row = el("tr", {"data-rank": o.rank});
    if (o.rank === plan.recommended) row.className = "recommended";
    for (const c of cells) row.append(el("td", {}, String(c)));
    body.append(row);
  }
}

function fillText(plan) {
  $("summary").textContent = `${plan.model.name} for ${plan.task.name}: ${plan.verdict.replaceAll("_", " ")}`;
  const devices = plan.pools.filter((p) => p.kind === "gpu")
    .map((p) => `${p.device}: budget ${gib(p.budget_bytes)} GiB of ${gib(p.capacity_bytes)} GiB`);
  $("device").textContent = `${devices.join("; ")} (${plan.resolved.engine_build})`;
  const best = plan.options.find((o) => o.rank === plan.recommended);
  $("launch").hidden = !best;
  $("launch-line").textContent = best ? Object.values(best.launch)[0] : "";
  $("copy").textContent = "Copy";
  const fill = (id, lines) => $(id).replaceChildren(...lines.map((line) => el("li", {}, line)));
  fill("explanation", plan.explanation.length ? plan.explanation : [plan.nothing_fits || plan.nothing_acceptable || ""]);
  fill("warnings", plan.warnings.map((w) => "Warning: " + w));
}

async function copyLaunchLine() {
  const text = $("launch-line").textContent;
  try {
    await navigator.clipboard.writeText(text);
  } catch {  // no clipboard API (not a secure context): select it for Ctrl+C
    const range = document.createRange();
    range.selectNodeContents($("launch-line"));
    window.getSelection().removeAllRanges();
    window.getSelection().addRange(range);
    document.execCommand("copy");
  }
  $("copy").textContent = "Copied";
}

// The chart's data: for each K/V pair, /plan of the recommended weights pinned at CHART_POINTS contexts (with
// llama.cpp every layer on the GPU, as kvplan.plots.memory_vs_context does), each point the plan's GPU-0 allocations
// at their upper bound; and the pair's largest fitting context from /plan with max-ctx.
async function chartSeries(plan, params) {
  const weights = (plan.options.find((o) => o.rank === plan.recommended) || plan.options[0]).weights;
  const pairs = [];
  for (const o of plan.options)
    if (!pairs.some((p) => p.k === o.cache_type_k && p.v === o.cache_type_v) && pairs.length < CHART_PAIRS)
      pairs.push({k: o.cache_type_k, v: o.cache_type_v, fa: o.flash_attn});
  const top = Math.max(plan.model.ctx_native_tokens, ...plan.options.map((o) => o.ctx_size));
  const contexts = Array.from({length: CHART_POINTS}, (_, i) => Math.max(256, Math.round(top * (i + 1) / CHART_POINTS / 256) * 256));
  const pinned = (pair, extra) => {
    const p = new URLSearchParams(params);
    p.delete("ctx-size");
    for (const [k, v] of [["weights", weights], ["cache-type-k", pair.k], ["cache-type-v", pair.v], ...extra]) p.append(k, v);
    if (plan.resolved.engine_id === "llama.cpp") {  // llama.cpp's own flags: the option's flash attention, no offload
      p.append("flash-attn", pair.fa);
      p.append("n-gpu-layers", "all");
    }
    return api("plan", p);
  };
  return {weights, series: await Promise.all(pairs.map(async (pair) => {
    const answers = await Promise.all(contexts.map((c) => pinned(pair, [["ctx-size", String(c)]])));
    const points = answers.filter((a) => a.status === 200 && a.body.options.length)
      .map((a) => ({ctx: a.body.options[0].ctx_size, bytes: a.body.options[0].pools[0].allocations_high_bytes}));
    const largest = await pinned(pair, [["max-ctx", ""]]);
    const best = largest.status === 200 && largest.body.fits ? largest.body.options[0] : null;
    return {...pair, points, max: best && {ctx: best.ctx_size, bytes: best.pools[0].allocations_high_bytes}};
  }))};
}

function drawChart(plan, {weights, series}) {
  const W = 760, H = 320, left = 64, right = 16, top = 16, bottom = 44, legendRow = 18;
  const budget = plan.pools[0].budget_bytes;
  const all = series.flatMap((s) => s.points);
  const xMax = Math.max(...all.map((p) => p.ctx), 1);
  const yMax = Math.max(...all.map((p) => p.bytes), budget || 0) * 1.05;
  const x = (ctx) => left + (W - left - right) * ctx / xMax;
  const y = (bytes) => H - bottom - (H - top - bottom) * bytes / yMax;
  const height = H + legendRow * series.length;  // the legend goes under the axis
  const chart = svg("svg", {viewBox: `0 0 ${W} ${height}`, width: W, height, role: "img", id: "memory-chart",
    "aria-label": `GPU memory against context for ${plan.model.name}`});
  for (let i = 0; i <= 4; i++) {  // axes: gridlines and labels
    const bytes = yMax * i / 4, ctx = xMax * i / 4;
    chart.append(svg("line", {x1: left, x2: W - right, y1: y(bytes), y2: y(bytes), class: "grid"}));
    chart.append(svg("text", {x: left - 6, y: y(bytes) + 4, "text-anchor": "end", class: "tick"}, gib(bytes)));
    chart.append(svg("text", {x: x(ctx), y: H - bottom + 16, "text-anchor": "middle", class: "tick"}, `${Math.round(ctx / 1024)}k`));
  }
  chart.append(svg("text", {x: (W + left) / 2, y: H - 6, "text-anchor": "middle", class: "axis"}, "context (tokens)"));
  chart.append(svg("text", {x: 14, y: (H - bottom) / 2, transform: `rotate(-90 14 ${(H - bottom) / 2})`,
    "text-anchor": "middle", class: "axis"}, "GiB"));
  if (budget) {
    chart.append(svg("line", {x1: left, x2: W - right, y1: y(budget), y2: y(budget), class: "budget", "data-bytes": budget}));
    chart.append(svg("text", {x: W - right, y: y(budget) - 5, "text-anchor": "end", class: "budget-label"},
      `budget ${gib(budget)} GiB`));
  }
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const d = s.points.map((p, j) => `${j ? "L" : "M"}${x(p.ctx).toFixed(1)},${y(p.bytes).toFixed(1)}`).join(" ");
    const g = svg("g", {class: "series", "data-k": s.k, "data-v": s.v, "data-max-ctx": s.max ? s.max.ctx : ""});
    g.append(svg("path", {d, stroke: color, fill: "none", "stroke-width": 2}));
    for (const p of s.points)
      g.append(svg("circle", {cx: x(p.ctx), cy: y(p.bytes), r: 3, fill: color, class: "point", "data-ctx": p.ctx, "data-bytes": p.bytes}));
    if (s.max)
      g.append(svg("circle", {cx: x(s.max.ctx), cy: y(s.max.bytes), r: 6, fill: "white", stroke: color, "stroke-width": 2,
        class: "max", "data-ctx": s.max.ctx, "data-bytes": s.max.bytes}));
    g.append(svg("text", {x: left, y: H + 6 + legendRow * i, fill: color, class: "legend"},
      `K=${s.k} V=${s.v}: ` + (s.max ? `fits up to ${s.max.ctx.toLocaleString("en")} tokens` : "does not fit")));
    chart.append(g);
  });
  $("chart").replaceChildren(chart);
  $("chart-note").textContent = `${weights} weights, every layer on GPU 0; each point is the plan of that context ` +
    "at its upper bound (weights + K/V cache + compute), the ringed one the largest that fits.";
}

async function submit(event) {
  event.preventDefault();
  const params = formParams();
  $("status").textContent = "planning…";
  $("status").className = "";
  document.body.dataset.state = "busy";
  const {status, body} = await api("plan", params);
  if (status !== 200) return showError(body);
  $("status").textContent = "";
  fillTable(body);
  fillText(body);
  $("results").hidden = false;
  $("chart").replaceChildren();
  $("chart-note").textContent = "drawing…";
  if (body.options.length) drawChart(body, await chartSeries(body, params));
  document.body.dataset.state = "done";  // for the browser test: everything is drawn
}

function addGpu() {
  const input = el("input", {class: "gpu", name: "gpu", list: "gpu-list", placeholder: "another GPU"});
  $("gpus").append(input);
  input.focus();
}

document.addEventListener("DOMContentLoaded", async () => {
  $("plan-form").addEventListener("submit", (e) => submit(e).catch((err) => {
    $("status").textContent = String(err);
    $("status").className = "error";
  }));
  $("add-gpu").addEventListener("click", addGpu);
  $("copy").addEventListener("click", copyLaunchLine);
  await loadCatalog();
  document.body.dataset.state = "ready";
});
