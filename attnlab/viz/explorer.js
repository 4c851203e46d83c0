/* attnlab attention explorer — the renderer.  Reads the JSON payload from
 * <script id="attnlab-data" type="application/json"> and draws, for the chosen
 * sentence, kind, layer and head:
 *   - a heatmap (canvas; rows = queries, columns = keys; hover shows both tokens and w_ij),
 *   - a lines view (bertviz "head view": query tokens left, key tokens right,
 *     one line per weight, opacity = w_ij; hover a token to isolate its lines),
 *   - a layer × head grid coloured by role, and the chosen head's role badge and scores.
 * Weights arrive as base64 little-endian uint16, w = q / 65535.  No network, no libraries.
 */
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("attnlab-data").textContent);
  var ROLE_COLORS = {
    "positional": "#2b8cbe", "syntactic": "#31a354", "rare-token": "#e6550d",
    "sink": "#756bb1", "broad": "#969696", "other": "#d9d9d9"
  };
  var SIDES = { encoder: ["src", "src"], decoder: ["tgt", "tgt"], cross: ["tgt", "src"] };
  var cache = {};
  var state = { s: 0, kind: data.kinds[0], layer: 0, head: 0, focus: -1 };

  function svgEl(tag, attrs) {
    var e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    return e;
  }

  /* weights of (sentence, kind) as Float32Array (L*H*nq*nk), decoded once */
  function weights(s, kind) {
    var key = s + "/" + kind;
    if (!cache[key]) {
      var bin = atob(data.weights[data.sentences[s].id + "/" + kind]);
      var bytes = new Uint8Array(bin.length);
      for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      var q = new Uint16Array(bytes.buffer);
      var w = new Float32Array(q.length);
      for (var k = 0; k < q.length; k++) w[k] = q[k] / 65535;
      cache[key] = w;
    }
    return cache[key];
  }
  function tokens() {
    var sent = data.sentences[state.s], sides = SIDES[state.kind];
    return { q: sent.tokens[sides[0]], k: sent.tokens[sides[1]] };
  }
  function matrix() {  /* the chosen head: accessor w(i, j) */
    var t = tokens(), nq = t.q.length, nk = t.k.length;
    var LH = data.shape[state.kind], H = LH[1];
    var base = ((state.layer * H) + state.head) * nq * nk, w = weights(state.s, state.kind);
    return { nq: nq, nk: nk, at: function (i, j) { return w[base + i * nk + j]; } };
  }
  function fmt(x) { return x.toFixed(4); }

  /* ---- controls --------------------------------------------------------- */

  function buildControls() {
    fillSelect($("sel-sentence"), range(data.sentences.length),
      data.sentences.map(function (s, i) { return (i + 1) + ". " + (s.text.length > 70 ? s.text.slice(0, 69) + "…" : s.text); }), state.s);
    fillSelect($("sel-kind"), data.kinds, data.kinds, state.kind);
    var LH = data.shape[state.kind];
    fillSelect($("sel-layer"), range(LH[0]), range(LH[0]).map(String), state.layer);
    fillSelect($("sel-head"), range(LH[1]), range(LH[1]).map(String), state.head);
  }

  /* ---- role grid and badge ---------------------------------------------- */
  function role(kind, l, h) {
    var r = data.roles && data.roles[kind];
    return r ? r[l][h] : null;
  }
  function buildGrid() {
    var grid = $("head-grid"), LH = data.shape[state.kind];
    grid.innerHTML = "";
    var table = el("table", { "class": "grid" });
    var hdr = el("tr");
    hdr.appendChild(el("th", {}, ""));
    range(LH[1]).forEach(function (h) { hdr.appendChild(el("th", {}, "H" + h)); });
    table.appendChild(hdr);
    range(LH[0]).forEach(function (l) {
      var tr = el("tr");
      tr.appendChild(el("th", {}, "L" + l));
      range(LH[1]).forEach(function (h) {
        var r = role(state.kind, l, h), name = r ? r.role : "other";
        var td = el("td", { id: "cell-" + state.kind + "-" + l + "-" + h, title: "layer " + l + ", head " + h + ": " + name,
                            "class": "gcell" + (l === state.layer && h === state.head ? " chosen" : "") });
        td.style.background = ROLE_COLORS[name] || ROLE_COLORS.other;
        if (name === "other") td.style.color = "#555";
        td.textContent = r ? name.charAt(0).toUpperCase() : "";
        td.addEventListener("click", function () { state.layer = l; state.head = h; update(); });
        tr.appendChild(td);
      });
      table.appendChild(tr);
    });
    grid.appendChild(table);
    var legend = el("div", { "class": "legend" });
    Object.keys(ROLE_COLORS).forEach(function (k) {
      var item = el("span", { "class": "legend-item" });
      var sw = el("span", { "class": "swatch" }); sw.style.background = ROLE_COLORS[k];
      item.appendChild(sw); item.appendChild(document.createTextNode(k));
      legend.appendChild(item);
    });
    grid.appendChild(legend);
  }
  function buildBadge() {
    var r = role(state.kind, state.layer, state.head), box = $("role");
    box.innerHTML = "";
    var badge = el("span", { id: "role-badge", "class": "badge" }, r ? r.role : "no roles");
    badge.style.background = r ? (ROLE_COLORS[r.role] || ROLE_COLORS.other) : "#eee";
    box.appendChild(el("span", { "class": "headname" }, state.kind + " · layer " + state.layer + " · head " + state.head));
    box.appendChild(badge);
    if (!r) return;
    var keys = ["confidence", "positional", "offset", "rare_token", "rare_token_2", "sink", "sink_token", "entropy", "syntactic"];
    var dl = el("div", { "class": "scores" });
    keys.forEach(function (k) {
      if (r[k] === undefined || r[k] === null) return;
      var v = typeof r[k] === "number" && k !== "offset" ? fmt(r[k]) : String(r[k]);
      dl.appendChild(el("span", { "class": "score" }, k.replace(/_/g, " ") + " " + v));
    });
    box.appendChild(dl);
  }

  /* ---- heatmap (canvas) ------------------------------------------------- */
  function viridis(x) {  /* 5-stop approximation of matplotlib's viridis */
    var st = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
    x = Math.max(0, Math.min(1, x)) * 4;
    var i = Math.min(3, Math.floor(x)), f = x - i, a = st[i], b = st[i + 1];
    return "rgb(" + Math.round(a[0] + f * (b[0] - a[0])) + "," + Math.round(a[1] + f * (b[1] - a[1])) + "," + Math.round(a[2] + f * (b[2] - a[2])) + ")";
  }
  var geom = null;
  function drawHeatmap() {
    var m = matrix(), t = tokens(), cv = $("heatmap"), ctx = cv.getContext("2d");
    var cell = Math.max(8, Math.min(30, Math.floor(520 / Math.max(m.nq, m.nk))));
    var font = Math.max(8, Math.min(13, cell - 2));
    ctx.font = font + "px sans-serif";
    var lw = 0;
    t.q.concat(t.k).forEach(function (s) { lw = Math.max(lw, ctx.measureText(clip(s, 16)).width); });
    var left = Math.ceil(lw) + 10, top = Math.ceil(lw) + 10;
    var dpr = window.devicePixelRatio || 1, W = left + cell * m.nk + 4, Hh = top + cell * m.nq + 4;
    cv.width = Math.round(W * dpr); cv.height = Math.round(Hh * dpr);
    cv.style.width = W + "px"; cv.style.height = Hh + "px";
    ctx = cv.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, Hh);
    var vmax = 1e-9;
    for (var i = 0; i < m.nq; i++) for (var j = 0; j < m.nk; j++) vmax = Math.max(vmax, m.at(i, j));
    if ($("opt-global").checked) vmax = 1;
    for (i = 0; i < m.nq; i++) for (j = 0; j < m.nk; j++) {
      ctx.fillStyle = viridis(m.at(i, j) / vmax);
      ctx.fillRect(left + j * cell, top + i * cell, cell, cell);
    }
    ctx.font = font + "px sans-serif"; ctx.fillStyle = "#222"; ctx.textBaseline = "middle";
    ctx.textAlign = "right";
    t.q.forEach(function (s, i) { ctx.fillText(clip(s, 16), left - 5, top + (i + 0.5) * cell); });
    t.k.forEach(function (s, j) {
      ctx.save(); ctx.translate(left + (j + 0.5) * cell, top - 5); ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left"; ctx.fillText(clip(s, 16), 0, 0); ctx.restore();
    });
    geom = { left: left, top: top, cell: cell, nq: m.nq, nk: m.nk };
    cv.dataset.left = left; cv.dataset.top = top; cv.dataset.cell = cell;
    cv.dataset.head = state.kind + "-" + state.layer + "-" + state.head;
    $("scale").textContent = "colour: 0 → " + fmt(vmax);
  }
  function hover(ev) {
    var cv = $("heatmap"), r = cv.getBoundingClientRect(), tip = $("tooltip");
    if (!geom) return;
    var x = ev.clientX - r.left, y = ev.clientY - r.top;
    var j = Math.floor((x - geom.left) / geom.cell), i = Math.floor((y - geom.top) / geom.cell);
    if (i < 0 || j < 0 || i >= geom.nq || j >= geom.nk) { tip.style.display = "none"; return; }
    var t = tokens(), w = matrix().at(i, j);
    tip.textContent = "query " + i + " “" + t.q[i] + "” → key " + j + " “" + t.k[j] + "”: " + fmt(w);
    tip.dataset.i = i; tip.dataset.j = j; tip.dataset.w = fmt(w);
    tip.style.display = "block";
    tip.style.left = (ev.pageX + 14) + "px"; tip.style.top = (ev.pageY + 14) + "px";
  }

  /* ---- lines view (SVG) ------------------------------------------------- */
  function drawLines() {
    var m = matrix(), t = tokens(), svg = $("lines"), rowH = 20, colW = 150, gap = 170;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var n = Math.max(m.nq, m.nk), H = n * rowH + 30;
    svg.setAttribute("width", 2 * colW + gap); svg.setAttribute("height", H);
    var g = svgEl("g", { id: "lines-g" });
    svg.appendChild(g);
    svg.appendChild(svgEl("text", { x: colW - 6, y: 12, "text-anchor": "end", "class": "colhead" })).textContent = "queries";
    svg.appendChild(svgEl("text", { x: colW + gap + 6, y: 12, "class": "colhead" })).textContent = "keys";
    for (var i = 0; i < m.nq; i++) for (var j = 0; j < m.nk; j++) {
      var w = m.at(i, j);
      if (w < 0.01) continue;
      g.appendChild(svgEl("line", {
        x1: colW, y1: 30 + (i + 0.5) * rowH - 5, x2: colW + gap, y2: 30 + (j + 0.5) * rowH - 5,
        "stroke-width": 2, "stroke-opacity": Math.min(1, w).toFixed(3), "class": "ln q" + i + " k" + j
      }));
    }
    function label(s, x, y, anchor, cls, idx) {
      var e = svgEl("text", { x: x, y: y, "text-anchor": anchor, "class": "tok " + cls, "data-idx": idx });
      e.textContent = s;
      svg.appendChild(e);
      return e;
    }
    t.q.forEach(function (s, i) {
      var e = label(s, colW - 6, 30 + (i + 0.5) * rowH, "end", "qtok", i);
      e.addEventListener("mouseenter", function () { focus("q" + i); });
      e.addEventListener("mouseleave", function () { focus(null); });
    });
    t.k.forEach(function (s, j) {
      var e = label(s, colW + gap + 6, 30 + (j + 0.5) * rowH, "start", "ktok", j);
      e.addEventListener("mouseenter", function () { focus("k" + j); });
      e.addEventListener("mouseleave", function () { focus(null); });
    });
  }
  function focus(cls) {
    var lines = document.querySelectorAll("#lines-g line");
    for (var k = 0; k < lines.length; k++) {
      lines[k].style.display = !cls || lines[k].classList.contains(cls) ? "" : "none";
    }
  }

  /* ---- update ----------------------------------------------------------- */
  function update() {
    var LH = data.shape[state.kind];
    state.layer = Math.min(state.layer, LH[0] - 1); state.head = Math.min(state.head, LH[1] - 1);
    buildControls(); buildGrid(); buildBadge(); drawHeatmap(); drawLines();
    var sent = data.sentences[state.s];
    $("sentence-info").textContent = clip(sent.text, 240) + (sent.target ? "  ⟶  " + clip(sent.target, 240) : "") +
      (sent.pooled ? "  (long input: " + sent.pooled + " tokens per cell)" : "");
  }
  $("sel-sentence").addEventListener("change", function (e) { state.s = +e.target.value; state.kind = state.kind; update(); });
  $("sel-kind").addEventListener("change", function (e) { state.kind = e.target.value; update(); });
  $("sel-layer").addEventListener("change", function (e) { state.layer = +e.target.value; update(); });
  $("sel-head").addEventListener("change", function (e) { state.head = +e.target.value; update(); });
  $("opt-global").addEventListener("change", drawHeatmap);
  $("heatmap").addEventListener("mousemove", hover);
  $("heatmap").addEventListener("mouseleave", function () { $("tooltip").style.display = "none"; });
  document.title = "attnlab — " + (data.model.name || "attention");
  $("model-name").textContent = data.model.name || "";
  update();
})();
