/* attnlab long-input explorer — the chosen head's small plots: the band profile (mass by distance i − j, log–log)
 * and the column mass (mass by key j), with the fit's and the plan's w and columns drawn on them.
 * ``longExplorerPlots(E)`` takes the renderer's shared state E = {data, state, blobs, headBase, FIT, PLAN}.
 */
function longExplorerPlots(E) {
  "use strict";
  var data = E.data, state = E.state, blobs = E.blobs, headBase = E.headBase, FIT = E.FIT, PLAN = E.PLAN, n = data.n;
  function plotFrame(cv, W, Hh) {
    var dpr = window.devicePixelRatio || 1;
    cv.width = Math.round(W * dpr); cv.height = Math.round(Hh * dpr); cv.style.width = W + "px"; cv.style.height = Hh + "px";
    var ctx = cv.getContext("2d"); ctx.setTransform(dpr, 0, 0, dpr, 0, 0); ctx.clearRect(0, 0, W, Hh);
    ctx.font = "10px sans-serif"; ctx.fillStyle = "#444"; ctx.strokeStyle = "#999";
    return ctx;
  }
  function vline(ctx, x, y0, y1, colour, dash) { ctx.save(); ctx.strokeStyle = colour; ctx.setLineDash(dash || []); ctx.lineWidth = 1.5; ctx.beginPath(); ctx.moveTo(x, y0); ctx.lineTo(x, y1); ctx.stroke(); ctx.restore(); }
  function yAxis(ctx, x0, y, ylo, yhi, ph) {
    ctx.textAlign = "right"; ctx.textBaseline = "middle";
    for (var e = Math.ceil(ylo); e <= Math.floor(yhi); e += Math.max(1, Math.round((yhi - ylo) / 4))) ctx.fillText("1e" + e, x0 - 3, y(e));
    ctx.strokeRect(x0, 8, ph.w, ph.h);
  }
  function drawProfile() {
    var b = blobs.profile, edges = data.profile_edges, nb = edges.length - 1, base = headBase("profile");
    var W = 470, Hh = 190, x0 = 44, pw = W - x0 - 10, ph = 150, ctx = plotFrame($("profile"), W, Hh);
    var dens = [], top = -Infinity;
    for (var k = 0; k < nb; k++) { var v = b.lut[b.q[base + k]] / (edges[k + 1] - edges[k]); dens.push(v); if (v > 0) top = Math.max(top, Math.log10(v)); }
    var ylo = top - 8, lmax = Math.log10(n + 1);
    function x(d) { return x0 + Math.log10(d + 1) / lmax * pw; }
    function y(e) { return 8 + (top - e) / (top - ylo) * ph; }
    yAxis(ctx, x0, y, ylo, top, { w: pw, h: ph });
    ctx.strokeStyle = "#1f77b4"; ctx.lineWidth = 1.5; ctx.beginPath();
    var started = false;
    for (k = 0; k < nb; k++) {
      if (!(dens[k] > 0)) { started = false; continue; }
      var yy = y(Math.max(ylo, Math.log10(dens[k])));
      if (!started) { ctx.moveTo(x(edges[k]), yy); started = true; } else ctx.lineTo(x(edges[k]), yy);
      ctx.lineTo(x(edges[k + 1]), yy);
    }
    ctx.stroke();
    var info = data.heads[state.k][state.h];
    if ($("opt-fit").checked && info.fit.w >= 0) vline(ctx, x(info.fit.w + 1), 8, 8 + ph, FIT);
    if ($("opt-plan").checked && info.plan && !info.plan.full) vline(ctx, x(info.plan.w + 1), 8, 8 + ph, PLAN, [6, 3]);
    if (data.sliding_window && data.layer_types[state.k].indexOf("sliding") === 0) vline(ctx, x(data.sliding_window), 8, 8 + ph, "#d62728", [2, 2]);
    ctx.textAlign = "center"; ctx.textBaseline = "top"; ctx.fillStyle = "#444";
    [0, 1, 10, 100, 1000, 10000].forEach(function (d) { if (d < n) ctx.fillText(String(d), x(d), 10 + ph); });
    ctx.fillText("distance i − j (log); y: share of mass per unit distance (log)", x0 + pw / 2, 24 + ph);
    $("profile").dataset.head = data.layers[state.k] + "-" + state.h;
  }
  function drawColumns() {
    var b = blobs.columns, cg = data.column_group, nb = b.shape[2], base = headBase("columns");
    var W = 470, Hh = 190, x0 = 44, pw = W - x0 - 10, ph = 150, ctx = plotFrame($("columns"), W, Hh);
    var top = -Infinity;
    for (var k = 0; k < nb; k++) { var v = b.lut[b.q[base + k]]; if (v > 0) top = Math.max(top, Math.log10(v)); }
    var ylo = top - 6;
    function x(j) { return x0 + j / n * pw; }
    function y(e) { return 8 + (top - e) / (top - ylo) * ph; }
    yAxis(ctx, x0, y, ylo, top, { w: pw, h: ph });
    ctx.fillStyle = "#1f77b4";
    for (k = 0; k < nb; k++) {
      v = b.lut[b.q[base + k]];
      if (v > 0) { var yy = y(Math.max(ylo, Math.log10(v))); ctx.fillRect(x(k * cg), yy, Math.max(1, x((k + 1) * cg) - x(k * cg)), 8 + ph - yy); }
    }
    var info = data.heads[state.k][state.h];
    function ticks(js, colour) {  /* the fit's (or plan's) columns: triangles on the top edge */
      ctx.save(); ctx.fillStyle = colour;
      js.forEach(function (j) { var xx = x(j + 0.5); ctx.beginPath(); ctx.moveTo(xx, 15); ctx.lineTo(xx - 4, 8); ctx.lineTo(xx + 4, 8); ctx.fill(); });
      ctx.restore();
    }
    if ($("opt-fit").checked) ticks(info.fit.columns, FIT);
    if ($("opt-plan").checked && info.plan) ticks(info.plan.columns, PLAN);
    ctx.fillStyle = "#444"; ctx.textAlign = "center"; ctx.textBaseline = "top";
    [0, 0.25, 0.5, 0.75, 1].forEach(function (f) { ctx.fillText(String(Math.round(f * n)), x(f * n), 10 + ph); });
    ctx.fillText("key j (" + cg + " per bar); y: share of the head's mass (log)", x0 + pw / 2, 24 + ph);
    $("columns").dataset.head = data.layers[state.k] + "-" + state.h;
  }

  return { drawProfile: drawProfile, drawColumns: drawColumns };
}
