/* attnlab long-input explorer — the renderer.  Reads the JSON payload of
 * attnlab.viz.long_explorer from <script id="attnlab-data"> and draws, for the chosen head:
 *   - the layers × heads grid, every layer, with the heads' names (long_explorer_heads.js); click = choose,
 *   - the pooled overview (log or linear colour) with the fitted structure, the plan and the captured regions;
 *     a click snaps to the captured region under it or within SNAP_PX of it, and each region has a button,
 *   - the zoom: the exact token-level map of a selected region, from the rows kept at capture time, the
 *     tokens' text on both axes (every token, or every k-th when they are too many to read),
 *   - the band profile and the column mass (long_explorer_plots.js).
 * Maps arrive as log-quantised bytes, deflated, base64 (attnlab.viz.log_bytes): x = 10^(lo + (q−1)(hi−lo)/254).
 * No network, no libraries.
 */
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("attnlab-data").textContent);
  var DECADES = 5;              /* log scale: vmax · 10^-DECADES → vmax */
  var MAX_ZOOM = 256;           /* tokens per side of a zoomed region */
  var ZOOM_PX = 576;            /* pixels per side of the zoom's map */
  var SNAP_PX = 10;             /* a click this close (on screen) to a captured region zooms into it */
  var BG = [246, 246, 246];     /* masked (j > i, or outside a sliding window) */
  var FIT = "#00aa88", PLAN = "#c2188f", REGION = "rgba(255,255,255,0.85)", SEL = "#d62728";
  var L = data.layers.length, H = data.num_heads, n = data.n, g = data.pool;
  var G = Math.ceil(n / g), T = data.tile;
  var blobs = {}, state = { k: 0, h: 0, score: null, scale: "log", region: null, drag: null };

  function sig(x) { return x === 0 ? "0" : (x >= 0.01 ? x.toFixed(4) : x.toExponential(2)); }

  /* ---- data: blobs ------------------------------------------------------- */
  function inflate(b64) {
    var bin = atob(b64), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(stream).arrayBuffer().then(function (buf) { return new Uint8Array(buf); });
  }
  function decodeAll() {
    var names = Object.keys(data.blobs);
    return Promise.all(names.map(function (name) {
      var rec = data.blobs[name];
      return inflate(rec.data).then(function (q) {
        var lut = new Float32Array(256);
        for (var v = 1; v < 256; v++) lut[v] = Math.pow(10, rec.lo + (v - 1) * (rec.hi - rec.lo) / 254);
        blobs[name] = { q: q, lut: lut, shape: rec.shape };
      });
    }));
  }
  function headBase(name) {  /* offset of the chosen head's block in a (L, H, ...) blob */
    var b = blobs[name], per = 1;
    for (var i = 2; i < b.shape.length; i++) per *= b.shape[i];
    return (state.k * H + state.h) * per;
  }

  /* ---- colours ----------------------------------------------------------- */
  var VIRIDIS = (function () {
    var st = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142], [31, 158, 137],
              [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]];
    var out = new Uint8Array(256 * 3);
    for (var v = 0; v < 256; v++) {
      var x = v / 255 * (st.length - 1), i = Math.min(st.length - 2, Math.floor(x)), f = x - i;
      for (var c = 0; c < 3; c++) out[3 * v + c] = Math.round(st[i][c] + f * (st[i + 1][c] - st[i][c]));
    }
    return out;
  })();
  function rgb(t) { var v = Math.max(0, Math.min(255, Math.round(t * 255))) * 3; return "rgb(" + VIRIDIS[v] + "," + VIRIDIS[v + 1] + "," + VIRIDIS[v + 2] + ")"; }
  function normaliser(vmax) {  /* value → t in [0, 1] under the chosen scale */
    if (state.scale === "linear") return function (x) { return x / vmax; };
    var top = Math.log10(vmax);
    return function (x) { return x > 0 ? (Math.log10(x) - top + DECADES) / DECADES : 0; };
  }
  function scaleText(vmax) {
    return state.scale === "linear" ? "linear colour: 0 → " + sig(vmax) : "log colour: " + sig(vmax * Math.pow(10, -DECADES)) + " → " + sig(vmax);
  }
  function masked(l, i, j) {  /* entries the model never computes: the future, or outside a sliding window */
    if (j > i) return true;
    var sliding = data.layer_types[l].indexOf("sliding") === 0 && data.sliding_window;
    return sliding ? i - j >= data.sliding_window : false;
  }

  /* ---- controls ---------------------------------------------------------- */
  function buildControls() {
    fillSelect($("sel-layer"), range(L), data.layers.map(function (l, k) { return l + " (" + data.layer_types[k].split("_")[0] + ")"; }), state.k);
    fillSelect($("sel-head"), range(H), range(H).map(String), state.h);
    var keys = ["role"].concat(Object.keys(data.scores).sort(function (a, b) {
      return (a.indexOf("det:") === 0 ? 0 : 1) - (b.indexOf("det:") === 0 ? 0 : 1) || (a < b ? -1 : 1);
    }));
    if (state.score === null) state.score = "role";  /* the heads' names: the detectors', else the capture's roles */
    var names = (data.detectors || []).length ? "names (detectors, else capture role)" : "role (capture)";
    fillSelect($("sel-score"), keys, keys.map(function (k) { return k === "role" ? names : k.replace("det:", "detector: "); }), state.score);
    $("opt-plan").disabled = !data.plan;
  }

  function tok(j) { return j >= 0 && j < n ? data.tokens[j] : "?"; }

  /* ---- overlays ---------------------------------------------------------- */
  /* draw the head's structure in a box whose token→pixel map is px(t) = o + (t − t0) · s, for rows r0..r1 */
  function drawStructure(ctx, geo) {
    var info = data.heads[state.k][state.h];
    function line(i0, j0, i1, j1, colour, dash) {
      ctx.save(); ctx.strokeStyle = colour; ctx.lineWidth = 1.5; ctx.setLineDash(dash || []);
      ctx.beginPath(); ctx.moveTo(geo.x(j0), geo.y(i0)); ctx.lineTo(geo.x(j1), geo.y(i1)); ctx.stroke(); ctx.restore();
    }
    function band(w, colour, dash) {  /* the band's lower edge: j = i − w (keys j ≥ i − w are in the band) */
      var a = Math.max(geo.r0, geo.c0 + w), b = Math.min(geo.r1, geo.c1 + w);
      if (a < b) line(a, a - w, b, b - w, colour, dash);
    }
    function columns(js, colour) {  /* a tick above the map for each; a line down the map when they are few */
      js.forEach(function (j) {
        if (j < geo.c0 || j >= geo.c1) return;
        var x = geo.x(j + 0.5), y = geo.y(geo.r0);
        ctx.save(); ctx.fillStyle = colour; ctx.beginPath(); ctx.moveTo(x, y + 7); ctx.lineTo(x - 4, y); ctx.lineTo(x + 4, y); ctx.fill(); ctx.restore();
        var a = Math.max(geo.r0, j);
        if (js.length <= 8 && a < geo.r1) line(a, j + 0.5, geo.r1, j + 0.5, colour, [3, 2]);
      });
    }
    if ($("opt-fit").checked) {
      if (info.fit.w >= 0) band(info.fit.w, FIT);
      if (info.offset !== 0) { var o = info.offset, a = Math.max(geo.r0, geo.c0 - o), b = Math.min(geo.r1, geo.c1 - o); if (a < b) line(a, a + o + 0.5, b, b + o + 0.5, FIT, [1, 3]); }
      columns(info.fit.columns, FIT);
    }
    if ($("opt-plan").checked && info.plan && !info.plan.full) {
      band(info.plan.w, PLAN, [6, 3]);
      columns(info.plan.columns, PLAN);
    }
  }
  function regions() {  /* the exact regions of the chosen head: [{r0, c0, size, blob, base}] */
    var out = [];
    if (data.window) out.push({ r0: data.window[0], c0: data.window[0], size: data.window[1] - data.window[0], name: "window " + data.window[0] + ":" + data.window[1], blob: "window", slot: 0 });
    if (data.tile_pos) data.tile_pos[state.k][state.h].forEach(function (p, s) {
      if (p[0] >= 0) out.push({ r0: p[0], c0: p[1], size: T, name: "tile " + (s + 1), blob: "tiles", slot: s });
    });
    return out;
  }

  /* ---- overview ---------------------------------------------------------- */
  var ov = null;  /* geometry of the overview */
  function drawOverview() {
    var cv = $("overview"), b = blobs.pooled;
    if (!b) { $("overview-note").textContent = "this capture kept no pooled map (--pool)"; return; }
    var size = 460, left = 44, top = 8;  /* G × G cells scaled to size px (nearest neighbour) */
    var base = headBase("pooled"), vmax = 1e-30;
    for (var x = 0; x < G * G; x++) vmax = Math.max(vmax, b.lut[b.q[base + x]]);
    var norm = normaliser(vmax), img = new ImageData(G, G), l = state.k;
    for (var I = 0; I < G; I++) for (var J = 0; J < G; J++) {
      var v = b.lut[b.q[base + I * G + J]], p = 4 * (I * G + J);
      if (v === 0 && masked(l, Math.min(n - 1, I * g + g - 1), J * g)) { img.data[p] = BG[0]; img.data[p + 1] = BG[1]; img.data[p + 2] = BG[2]; }
      else { var c = Math.max(0, Math.min(255, Math.round(norm(v) * 255))) * 3; img.data[p] = VIRIDIS[c]; img.data[p + 1] = VIRIDIS[c + 1]; img.data[p + 2] = VIRIDIS[c + 2]; }
      img.data[p + 3] = 255;
    }
    var off = document.createElement("canvas"); off.width = G; off.height = G; off.getContext("2d").putImageData(img, 0, 0);
    var dpr = window.devicePixelRatio || 1, W = left + size + 10, Hh = top + size + 30;
    cv.width = Math.round(W * dpr); cv.height = Math.round(Hh * dpr); cv.style.width = W + "px"; cv.style.height = Hh + "px";
    var ctx = cv.getContext("2d"); ctx.setTransform(dpr, 0, 0, dpr, 0, 0); ctx.clearRect(0, 0, W, Hh);
    ctx.imageSmoothingEnabled = false; ctx.drawImage(off, left, top, size, size);
    var s = size / n;  /* pixels per token */
    ov = { left: left, top: top, size: size, s: s, vmax: vmax };
    var geo = { r0: 0, r1: n, c0: 0, c1: n, x: function (j) { return left + j * s; }, y: function (i) { return top + i * s; } };
    ctx.save(); ctx.beginPath(); ctx.rect(left, top, size, size); ctx.clip();
    drawStructure(ctx, geo);
    if ($("opt-regions").checked) regions().forEach(function (r) {
      var x = geo.x(r.c0) - 1, y = geo.y(r.r0) - 1, w = Math.max(4, r.size * s) + 2;
      ctx.strokeStyle = "#000"; ctx.lineWidth = 3; ctx.strokeRect(x, y, w, w);
      ctx.strokeStyle = REGION; ctx.lineWidth = 1.5; ctx.strokeRect(x, y, w, w);
    });
    var sel = state.drag || state.region;
    if (sel) { ctx.strokeStyle = SEL; ctx.lineWidth = 2; ctx.strokeRect(geo.x(sel.c0), geo.y(sel.r0), Math.max(3, (sel.c1 - sel.c0) * s), Math.max(3, (sel.r1 - sel.r0) * s)); }
    ctx.restore();
    ctx.fillStyle = "#444"; ctx.font = "11px sans-serif"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    [0, 0.25, 0.5, 0.75, 1].forEach(function (f) {
      var t = Math.round(f * n); ctx.fillText(String(t), left - 4, top + f * size);
      ctx.textAlign = "center"; ctx.fillText(String(t), left + f * size, top + size + 10); ctx.textAlign = "right";
    });
    ctx.textAlign = "center"; ctx.fillText("keys j (tokens)", left + size / 2, top + size + 23);
    cv.dataset.head = data.layers[state.k] + "-" + state.h; cv.dataset.scale = state.scale;
    cv.dataset.left = left; cv.dataset.top = top; cv.dataset.size = size;
    $("overview-note").textContent = n + " tokens, " + g + " per cell (" + G + " × " + G + "); " + scaleText(vmax) + ". Queries i down, keys j across.";
  }
  function ovToken(ev) {  /* (i, j) token under the mouse on the overview, clamped */
    var r = $("overview").getBoundingClientRect();
    var x = (ev.clientX - r.left - ov.left) / ov.s, y = (ev.clientY - r.top - ov.top) / ov.s;
    return { i: Math.max(0, Math.min(n - 1, Math.floor(y))), j: Math.max(0, Math.min(n - 1, Math.floor(x))), inside: x >= 0 && y >= 0 && x < n && y < n };
  }
  function ovHover(ev) {
    if (!ov) return;
    var t = ovToken(ev), tip = $("tooltip");
    if (state.drag) {
      var d = state.drag;
      d.r0 = Math.min(d.i, t.i); d.r1 = Math.max(d.i, t.i) + 1; d.c0 = Math.min(d.j, t.j); d.c1 = Math.max(d.j, t.j) + 1;
      drawOverview();
    }
    if (!t.inside) { tip.style.display = "none"; return; }
    var I = Math.floor(t.i / g), J = Math.floor(t.j / g), b = blobs.pooled, v = b.lut[b.q[headBase("pooled") + I * G + J]];
    var i0 = I * g, i1 = Math.min(n, i0 + g) - 1, j0 = J * g, j1 = Math.min(n, j0 + g) - 1;
    showTip(ev, "queries " + i0 + "–" + i1 + " “" + clip(data.tokens[i0], 14) + "…”\nkeys " + j0 + "–" + j1 + " “" + clip(data.tokens[j0], 14) +
            "…”\nmean row mass on these keys ≈ " + sig(v));
  }
  function showTip(ev, text) {
    var tip = $("tooltip");
    tip.textContent = text; tip.style.display = "block";
    tip.style.left = (ev.pageX + 14) + "px"; tip.style.top = (ev.pageY + 14) + "px";
  }
  function ovDown(ev) { if (!ov) return; var t = ovToken(ev); state.drag = { i: t.i, j: t.j, r0: t.i, r1: t.i + 1, c0: t.j, c1: t.j + 1 }; }
  function ovUp(ev) {
    if (!state.drag) return;
    var d = state.drag, small = (d.r1 - d.r0) * ov.s < 4 && (d.c1 - d.c0) * ov.s < 4;
    state.drag = null;
    if (small) {  /* a click: the captured region under it or nearest to it, else a tile-sized region around it */
      var hit = nearestRegion(d.i, d.j, SNAP_PX / ov.s);
      var half = (T || 64) / 2;
      selectRegion(hit ? hit.r0 : d.i - half, hit ? hit.r0 + hit.size : d.i + half, hit ? hit.c0 : d.j - half, hit ? hit.c0 + hit.size : d.j + half,
                   hit && hit.blob === "tiles");  /* a head's tile: the next head shows its own */
    } else selectRegion(d.r0, d.r1, d.c0, d.c1);
  }
  function nearestRegion(i, j, reach) {  /* the captured region nearest to token (i, j), at most ``reach`` tokens away */
    var best = null, bd = Infinity;
    regions().forEach(function (r) {
      var dy = Math.max(r.r0 - i, 0, i - (r.r0 + r.size - 1)), dx = Math.max(r.c0 - j, 0, j - (r.c0 + r.size - 1)), dist = Math.max(dx, dy);
      if (dist < bd) { bd = dist; best = r; }
    });
    return bd <= reach ? best : null;
  }
  function buildRegions() {  /* a button per captured region of the chosen head: on an 8K overview a tile is a few pixels */
    var box = $("regions");
    box.innerHTML = "";
    box.appendChild(document.createTextNode("captured exactly for this head: "));
    regions().forEach(function (r) {
      var R = state.region, on = R && R.r0 === r.r0 && R.c0 === r.c0 && R.r1 === Math.min(n, r.r0 + r.size) && R.c1 === Math.min(n, r.c0 + r.size);
      var b = el("button", { "class": "region" + (on ? " on" : ""), type: "button" }, r.name + " · rows " + r.r0 + ", keys " + r.c0);
      b.addEventListener("click", function () { selectRegion(r.r0, r.r0 + r.size, r.c0, r.c0 + r.size, r.blob === "tiles"); });
      box.appendChild(b);
    });
  }
  function bestTile() {  /* the chosen head's first zoom tile, else the window */
    var rs = regions();
    return rs.filter(function (r) { return r.blob === "tiles"; })[0] || rs[0];
  }
  function selectRegion(r0, r1, c0, c1, auto) {
    r0 = Math.max(0, Math.round(r0)); c0 = Math.max(0, Math.round(c0));
    r1 = Math.min(n, Math.max(r0 + 1, Math.round(r1))); c1 = Math.min(n, Math.max(c0 + 1, Math.round(c1)));
    var clamped = r1 - r0 > MAX_ZOOM || c1 - c0 > MAX_ZOOM;
    state.region = { r0: r0, r1: Math.min(r1, r0 + MAX_ZOOM), c0: c0, c1: Math.min(c1, c0 + MAX_ZOOM), clamped: clamped, auto: !!auto };
    drawOverview(); drawZoom(); buildRegions();
  }

  /* ---- zoom -------------------------------------------------------------- */
  var zg = null;
  function exactAt(rs, i, j) {  /* the exact value of the chosen head at (i, j), or null when not captured */
    for (var a = 0; a < rs.length; a++) {
      var r = rs[a];
      if (i >= r.r0 && i < r.r0 + r.size && j >= r.c0 && j < r.c0 + r.size) {
        var b = blobs[r.blob], S = b.shape[b.shape.length - 1];
        return b.lut[b.q[headBase(r.blob) + r.slot * S * S + (i - r.r0) * S + (j - r.c0)]];
      }
    }
    return null;
  }
  function drawZoom() {
    var R = state.region, cv = $("zoom"), note = $("zoom-note");
    if (!R) return;
    var rows = R.r1 - R.r0, cols = R.c1 - R.c0, rs = regions(), l = state.k;
    var cell = Math.max(1, Math.floor(ZOOM_PX / Math.max(rows, cols)));
    var step = Math.max(1, Math.ceil(9 / cell)), left = 90, top = 90;  /* a token's text every ``step`` rows and keys */
    var vals = new Float32Array(rows * cols), state_ = new Uint8Array(rows * cols);  /* 0 exact, 1 masked, 2 not captured */
    var need = 0, have = 0, vmax = 1e-30;
    for (var a = 0; a < rows; a++) for (var b = 0; b < cols; b++) {
      var i = R.r0 + a, j = R.c0 + b, x = a * cols + b;
      if (masked(l, i, j)) { state_[x] = 1; continue; }
      need++;
      var v = exactAt(rs, i, j);
      if (v === null) { state_[x] = 2; continue; }
      have++; vals[x] = v; vmax = Math.max(vmax, v);
    }
    var dpr = window.devicePixelRatio || 1, W = left + cell * cols + 10, Hh = top + cell * rows + 30;
    cv.width = Math.round(W * dpr); cv.height = Math.round(Hh * dpr); cv.style.width = W + "px"; cv.style.height = Hh + "px";
    var ctx = cv.getContext("2d"); ctx.setTransform(dpr, 0, 0, dpr, 0, 0); ctx.clearRect(0, 0, W, Hh);
    var norm = normaliser(vmax);
    for (a = 0; a < rows; a++) for (b = 0; b < cols; b++) {
      x = a * cols + b;
      ctx.fillStyle = state_[x] === 1 ? "rgb(" + BG.join(",") + ")" : state_[x] === 2 ? ((a + b) % 2 ? "#c8c8c8" : "#dedede") : rgb(norm(vals[x]));
      ctx.fillRect(left + b * cell, top + a * cell, cell, cell);
    }
    var geo = { r0: R.r0, r1: R.r1, c0: R.c0, c1: R.c1, x: function (j) { return left + (j - R.c0) * cell; }, y: function (i) { return top + (i - R.r0) * cell; } };
    ctx.save(); ctx.beginPath(); ctx.rect(left, top, cell * cols, cell * rows); ctx.clip(); drawStructure(ctx, geo); ctx.restore();
    ctx.fillStyle = "#333"; ctx.font = Math.min(12, Math.max(8, cell * step - 1)) + "px sans-serif"; ctx.textBaseline = "middle";
    var rowText = [], colText = [];  /* the queries' text left, the keys' text above (rotated) */
    ctx.textAlign = "right";
    for (a = 0; a < rows; a += step) { rowText.push(data.tokens[R.r0 + a]); ctx.fillText(clip(data.tokens[R.r0 + a], 12), left - 4, top + (a + 0.5) * cell); }
    for (b = 0; b < cols; b += step) {
      colText.push(data.tokens[R.c0 + b]);
      ctx.save(); ctx.translate(left + (b + 0.5) * cell, top - 4); ctx.rotate(-Math.PI / 2); ctx.textAlign = "left"; ctx.fillText(clip(data.tokens[R.c0 + b], 12), 0, 0); ctx.restore();
    }
    ctx.font = "11px sans-serif"; ctx.fillStyle = "#777"; ctx.textAlign = "left";  /* the positions at the corners */
    ctx.fillText("rows " + R.r0 + "–" + (R.r1 - 1) + " ↓, keys " + R.c0 + "–" + (R.c1 - 1) + " →", left, top + rows * cell + 12);
    zg = { left: left, top: top, cell: cell, rows: rows, cols: cols, vals: vals, st: state_ };
    cv.dataset.region = R.r0 + ":" + R.r1 + "," + R.c0 + ":" + R.c1; cv.dataset.head = data.layers[state.k] + "-" + state.h;
    cv.dataset.captured = need ? (have / need).toFixed(4) : "1"; cv.dataset.scale = state.scale;
    cv.dataset.left = left; cv.dataset.top = top; cv.dataset.cell = cell; cv.dataset.step = step;
    cv.dataset.rowTokens = JSON.stringify(rowText); cv.dataset.colTokens = JSON.stringify(colText);
    var where = "rows " + R.r0 + ":" + R.r1 + " × keys " + R.c0 + ":" + R.c1 + (R.clamped ? " (clamped to " + MAX_ZOOM + " tokens a side)" : "");
    note.classList.toggle("missing", need > 0 && have === 0);
    if (need === 0) {
      note.textContent = where + ": the model computes no attention there (keys after the query" +
        (data.sliding_window ? ", or beyond a sliding window" : "") + ").";
    } else if (need > 0 && have === 0) {
      var a0 = Math.min(R.r0, R.c0), wide = R.r1 - a0;
      note.textContent = where + ": outside the captured rows — the capture kept exact rows only in the outlined regions (the window " +
        (data.window ? data.window.join(":") : "none") + " and this head's zoom tiles). " + (wide <= 1024 ?
        "To see these, capture again with --rows " + a0 + ":" + R.r1 + " (rows and keys " + a0 + ":" + R.r1 + ")." :
        "A window holding these rows and keys would span " + wide + " tokens (--rows " + a0 + ":" + R.r1 + "), too many to keep exactly for every head.");
    } else {
      note.textContent = where + ": exact for " + (need ? (100 * have / need).toFixed(1) : "100") + "% of its computed entries" +
        (have < need ? " (hatched: not captured)" : "") + "; " + scaleText(vmax) + ".";
    }
  }
  function zoomHover(ev) {
    if (!zg) return;
    var r = $("zoom").getBoundingClientRect(), R = state.region;
    var b = Math.floor((ev.clientX - r.left - zg.left) / zg.cell), a = Math.floor((ev.clientY - r.top - zg.top) / zg.cell);
    if (a < 0 || b < 0 || a >= zg.rows || b >= zg.cols) { $("tooltip").style.display = "none"; return; }
    var i = R.r0 + a, j = R.c0 + b, x = a * zg.cols + b;
    function ctx(t) { return data.tokens.slice(Math.max(0, t - 4), t).join(" ") + " [" + data.tokens[t] + "]"; }
    var val = zg.st[x] === 1 ? "not computed (masked)" : zg.st[x] === 2 ? "not captured" : "≈ " + sig(zg.vals[x]);
    var tip = "query " + i + " “" + data.tokens[i] + "” → key " + j + " “" + data.tokens[j] + "”: " + val +
              "\nquery: …" + clip(ctx(i), 70) + "\nkey:   …" + clip(ctx(j), 70);
    $("tooltip").dataset.i = i; $("tooltip").dataset.j = j;
    showTip(ev, tip);
  }

  /* ---- the heads and the plots (long_explorer_heads.js, long_explorer_plots.js) ---- */
  var E = { data: data, state: state, blobs: blobs, headBase: headBase, FIT: FIT, PLAN: PLAN, sig: sig, rgb: rgb, tok: tok,
            choose: function (k, h) { state.k = k; state.h = h; update(); } };
  var heads = longExplorerHeads(E), plots = longExplorerPlots(E);

  /* ---- update ------------------------------------------------------------ */
  function update() {
    var best = bestTile();  /* a region picked for the last head follows the head: its own best tile */
    if (best && (!state.region || state.region.auto)) {
      state.region = { r0: best.r0, r1: Math.min(n, best.r0 + best.size), c0: best.c0, c1: Math.min(n, best.c0 + best.size), auto: true };
    }
    buildControls(); heads.buildGrid(); heads.buildInfo(); drawOverview(); drawZoom(); buildRegions(); plots.drawProfile(); plots.drawColumns();
  }
  function redraw() { drawOverview(); drawZoom(); plots.drawProfile(); plots.drawColumns(); }
  $("sel-layer").addEventListener("change", function (e) { state.k = +e.target.value; update(); });
  $("sel-head").addEventListener("change", function (e) { state.h = +e.target.value; update(); });
  $("sel-score").addEventListener("change", function (e) { state.score = e.target.value; heads.buildGrid(); });
  ["scale-log", "scale-linear"].forEach(function (id) {
    $(id).addEventListener("change", function (e) { if (e.target.checked) { state.scale = e.target.value; redraw(); } });
  });
  ["opt-fit", "opt-plan", "opt-regions"].forEach(function (id) { $(id).addEventListener("change", redraw); });
  $("overview").addEventListener("mousemove", ovHover);
  $("overview").addEventListener("mousedown", ovDown);
  window.addEventListener("mouseup", ovUp);
  $("overview").addEventListener("mouseleave", function () { $("tooltip").style.display = "none"; });
  $("zoom").addEventListener("mousemove", zoomHover);
  $("zoom").addEventListener("mouseleave", function () { $("tooltip").style.display = "none"; });

  document.title = "attnlab — " + data.model + " (" + n + " tokens)";
  $("model-name").textContent = data.model + " · " + n + " tokens · " + L + " of " + data.num_layers + " layers × " + H + " heads" +
    (data.plan ? " · plan " + data.plan.method + " β " + data.plan.budget : "") +
    (data.detectors_file ? " · head detectors: " + data.detectors_file : "");
  if (typeof DecompressionStream === "undefined") { $("status").textContent = "this browser cannot decompress the data (no DecompressionStream)"; return; }
  decodeAll().then(function () {
    update();  /* starts zoomed on the head's best tile */
    $("status").textContent = "click a head in the grid; drag (or click) on the overview to zoom; hover for tokens and values.";
    document.body.dataset.ready = String(Math.round(performance.now()));
  }).catch(function (err) { $("status").textContent = "could not read the data: " + err; console.error(err); });
})();
