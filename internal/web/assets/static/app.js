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
      return v.toPrecision(3) + " ms";
    }
    return v >= 10 ? v.toFixed(0) : v.toPrecision(2);
  }

  async function draw(svg) {
    const q = svg.dataset.queue;
    const fields = svg.dataset.fields.split(",");
    let data;
    try {
      const res = await fetch("/api/v1/queues/" + encodeURIComponent(q) + "/series", { credentials: "same-origin" });
      if (!res.ok) return;
      data = await res.json();
    } catch (e) { return; }
    const W = 600, H = 160, pts = data.points;
    let top = 0;
    for (const p of pts) for (const f of fields) if (p[f] != null) top = Math.max(top, p[f]);
    top = top > 0 ? top * 1.1 : 1;
    svg.replaceChildren();
    for (const y of [0.5, 1]) svg.append(el("line", { x1: 0, x2: W, y1: H - (H - 14) * y, y2: H - (H - 14) * y }));
    const t = el("text", { x: 4, y: 12 });
    t.textContent = label(top, svg.dataset.unit) + (pts.length ? "" : "  (collecting…)");
    svg.append(t);
    if (pts.length < 2) return;
    const t0 = Date.parse(pts[0].t), span = Math.max(1, Date.parse(pts[pts.length - 1].t) - t0);
    fields.forEach((f, i) => {
      const xy = [];
      for (const p of pts) {
        if (p[f] == null) continue;
        xy.push(((Date.parse(p.t) - t0) / span * W).toFixed(1) + "," + (H - (H - 14) * p[f] / top).toFixed(1));
      }
      svg.append(el("polyline", { points: xy.join(" "), class: "s" + i }));
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
