// Harbinger dashboard: the little JavaScript the pages need. Pages are
// rendered by the server and work without it; this keeps them live (the
// page's <main> is fetched again every few seconds), draws the charts from
// the JSON read API, and asks before destructive buttons.
"use strict";
(function () {
  const EVERY_MS = 2000;

  function busy() {
    // Never swap the page under someone typing or ticking.
    const a = document.activeElement;
    if (a && (a.tagName === "INPUT" || a.tagName === "TEXTAREA" || a.tagName === "SELECT")) return true;
    // Nor under a selection of jobs about to be acted on.
    return document.querySelector("input[data-group]:checked, input[data-all]:checked") !== null;
  }

  async function refresh() {
    if (document.visibilityState !== "visible" || busy()) return;
    const live = document.getElementById("live");
    if (!live) return;
    try {
      const res = await fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } });
      if (res.redirected) { location.assign(res.url); return; }
      // A 404 is news too: the job shown has ended, or the queue was
      // deleted. Other failures may pass: keep the page as it is.
      if (!res.ok && res.status !== 404) return;
      const doc = new DOMParser().parseFromString(await res.text(), "text/html");
      const next = doc.getElementById("live");
      if (!next || busy()) return;
      // Keep the charts: they redraw from the API, not from the page.
      const charts = live.querySelector(".charts");
      next.querySelectorAll(".flash").forEach((f) => f.remove());
      live.replaceChildren(...next.childNodes);
      const fresh = live.querySelector(".charts");
      if (charts && fresh) fresh.replaceWith(charts);
    } catch (e) {
      // The broker may be restarting: try again on the next tick.
    }
  }

  const NS = "http://www.w3.org/2000/svg";
  function el(name, attrs) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }
  function label(v, unit) {
    if (unit === "ms") {
      if (v >= 60000) return (v / 60000).toFixed(1) + " min";
      if (v >= 1000) return (v / 1000).toPrecision(3) + " s";
      if (v === 0) return "0";
      return v.toPrecision(3) + " ms";
    }
    const n = v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(0) : v === 0 ? "0" : v.toPrecision(2);
    return unit === "/s" ? n + "/s" : n;
  }
  function clock(t) {
    const d = new Date(t);
    return d.toISOString().substring(11, 19);
  }
  // nice rounds a chart's top up to 1, 2 or 5 times a power of ten.
  function nice(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  // draw renders one chart from its series: a y axis with its unit and
  // three ticks, a time axis (UTC) with four, one line per field.
  async function draw(svg) {
    const fields = svg.dataset.fields.split(",");
    const names = (svg.dataset.labels || svg.dataset.fields).split(",");
    const unit = svg.dataset.unit || "";
    let data;
    try {
      const res = await fetch(svg.dataset.src, { credentials: "same-origin" });
      if (!res.ok) return;
      data = await res.json();
    } catch (e) { return; }
    const W = 600, H = 200, L = 58, R = 10, T = 12, B = 34, pts = data.points;
    const w = W - L - R, h = H - T - B;
    let top = 0;
    for (const p of pts) for (const f of fields) if (p[f] != null) top = Math.max(top, p[f]);
    top = nice(top * 1.05);
    svg.replaceChildren();
    svg.append(el("rect", { x: L, y: T, width: w, height: h, class: "plot" }));
    for (const y of [0, 0.5, 1]) {
      const py = T + h - h * y;
      svg.append(el("line", { x1: L, x2: L + w, y1: py, y2: py, class: "grid" }));
      const t = el("text", { x: L - 6, y: py + 4, class: "tick y" });
      t.textContent = label(top * y, unit);
      svg.append(t);
    }
    const ylab = el("text", { x: 12, y: T + h / 2, class: "axis", transform: "rotate(-90 12 " + (T + h / 2) + ")" });
    ylab.textContent = unit === "/s" ? "jobs per second" : unit === "ms" ? "time" : "jobs";
    svg.append(ylab);
    const xlab = el("text", { x: L + w / 2, y: H - 2, class: "axis" });
    xlab.textContent = "time (UTC)";
    svg.append(xlab);
    if (pts.length < 2) {
      const c = el("text", { x: L + w / 2, y: T + h / 2, class: "axis" });
      c.textContent = "collecting…";
      svg.append(c);
      return;
    }
    const t0 = Date.parse(pts[0].t), t1 = Date.parse(pts[pts.length - 1].t), span = Math.max(1, t1 - t0);
    for (let i = 0; i <= 3; i++) {
      const at = t0 + span * i / 3, px = L + w * i / 3;
      svg.append(el("line", { x1: px, x2: px, y1: T + h, y2: T + h + 4, class: "grid" }));
      const t = el("text", { x: px, y: T + h + 16, class: "tick x" + (i === 0 ? " first" : i === 3 ? " last" : "") });
      t.textContent = clock(at);
      svg.append(t);
    }
    fields.forEach((f, i) => {
      const xy = [];
      for (const p of pts) {
        if (p[f] == null) continue;
        xy.push((L + (Date.parse(p.t) - t0) / span * w).toFixed(1) + "," + (T + h - h * p[f] / top).toFixed(1));
      }
      const line = el("polyline", { points: xy.join(" "), class: "s" + i });
      const title = el("title", {});
      title.textContent = names[i] || f;
      line.append(title);
      svg.append(line);
    });
  }

  function drawAll() { document.querySelectorAll("svg.chart").forEach(draw); }

  // A "select all" box ticks or clears every box of its group.
  document.addEventListener("change", (ev) => {
    const all = ev.target.closest("input[data-all]");
    if (!all) return;
    document.querySelectorAll('input[data-group="' + all.dataset.all + '"]').forEach((b) => { b.checked = all.checked; });
  });

  document.addEventListener("click", (ev) => {
    const b = ev.target.closest("[data-confirm]");
    if (b && !confirm(b.dataset.confirm)) ev.preventDefault();
  });

  document.addEventListener("DOMContentLoaded", () => {
    drawAll();
    if (document.getElementById("live") && !document.querySelector(".login")) {
      setInterval(() => { refresh(); drawAll(); }, EVERY_MS);
    }
  });
})();
