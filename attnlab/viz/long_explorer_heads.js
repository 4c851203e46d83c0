/* attnlab long-input explorer — the heads: what each head is called, the layers × heads grid and the chosen
 * head's panel.  A head's label is the detector that names it (heads.json of `attnlab heads`: its score reaches
 * the detector's threshold; of several, the most specific: induction, retrieval, duplicate-token, previous-token,
 * sink), else the capture's role on this text (attnlab.llm.heads.heads_file, computed in Python: info.label,
 * info.named_by).
 * ``longExplorerHeads(E)`` takes the renderer's shared state E = {data, state, sig, rgb, tok, choose}.
 */
function longExplorerHeads(E) {
  "use strict";
  var data = E.data, state = E.state, L = data.layers.length, H = data.num_heads;
  var LABELS = {  /* label → [letter, colour]: capitals the detectors' names, lower case the capture's roles */
    "induction": ["I", "#d62728"], "previous-token": ["←", "#08519c"], "duplicate-token": ["D", "#ff7f0e"],
    "retrieval": ["R", "#e377c2"], "sink": ["S", "#756bb1"],
    "positional": ["p", "#6baed6"], "syntactic": ["y", "#31a354"], "rare-token": ["r", "#e6550d"],
    "broad": ["b", "#969696"], "other": ["·", "#e4e4e4"]
  };
  var DETECTED = data.detectors || [];  /* the detectors' names (empty without --heads) */
  function look(info) {  /* [letter, colour] of a head: its label (a capture role "sink" in lower case) */
    var named = info.named_by.length > 0, x = LABELS[info.label] || [info.label.charAt(0), "#999"];
    return [named ? x[0] : x[0].toLowerCase(), x[1]];
  }
  function namedText(info) {
    return info.named_by.map(function (d) { return d[0] + " " + E.sig(d[1]) + " ≥ " + E.sig(d[2]); }).join(", ");
  }

  function scoreRange(vals, log) {
    var lo = Infinity, hi = -Infinity;
    vals.forEach(function (row) { row.forEach(function (v) { if (v !== null && (!log || v > 0)) { lo = Math.min(lo, v); hi = Math.max(hi, v); } }); });
    if (!isFinite(lo)) { lo = 0; hi = 1; }
    if (!log) lo = Math.min(0, lo);
    return [lo, hi === lo ? lo + 1 : hi];
  }
  function buildGrid() {
    var grid = $("head-grid"), legend = $("grid-legend"), sc = data.scores[state.score], counts = {};
    grid.innerHTML = ""; legend.innerHTML = "";
    var rng = sc ? scoreRange(sc.values, sc.log) : null;
    function t(v) {
      if (v === null || v === undefined) return null;
      return sc.log ? (Math.log(Math.max(v, rng[0])) - Math.log(rng[0])) / (Math.log(rng[1]) - Math.log(rng[0]) || 1) : (v - rng[0]) / (rng[1] - rng[0]);
    }
    var table = el("table", { "class": "grid" }), hdr = el("tr");
    hdr.appendChild(el("th", {}, ""));
    range(H).forEach(function (h) { hdr.appendChild(el("th", {}, "H" + h)); });
    table.appendChild(hdr);
    range(L).forEach(function (k) {
      var tr = el("tr"), l = data.layers[k];
      tr.appendChild(el("th", {}, "L" + l));
      range(H).forEach(function (h) {
        var info = data.heads[k][h], lk = look(info), td = el("td", { id: "cell-" + l + "-" + h, "class": "gcell" });
        var title = "layer " + l + ", head " + h + ": " + info.label, tv = null;
        counts[info.label] = (counts[info.label] || 0) + 1;
        if (info.named_by.length) { td.classList.add("named"); title += " (detectors: " + namedText(info) + ")\ncapture role on this text: " + info.role; }
        if (sc) { var v = sc.values[k][h]; tv = t(v); title += "\n" + sc.label + ": " + (v === null ? "—" : E.sig(v)); }
        td.title = title;
        td.dataset.label = info.label;
        if (sc) {
          td.style.background = tv === null ? "#fff" : E.rgb(tv);
          td.style.color = tv !== null && tv > 0.6 ? "#222" : "#fff";
        } else {
          td.style.background = lk[1];
          td.style.color = info.label === "other" ? "#888" : "#fff";
        }
        td.textContent = lk[0];
        if (k === state.k && h === state.h) td.classList.add("chosen");
        td.addEventListener("click", function () { E.choose(k, h); });
        tr.appendChild(td);
      });
      table.appendChild(tr);
    });
    grid.appendChild(table);
    var how = DETECTED.length ? "capitals: named by a detector (heads.json: " + DETECTED.join(", ") + "); lower case: the capture's role on this text"
                              : "the capture's roles on this text (give --heads HEADS.json of `attnlab heads` for the detectors' names)";
    if (sc) {
      var bar = el("span", { "class": "bar" }), stops = [];
      for (var s = 0; s <= 8; s++) stops.push(E.rgb(s / 8));
      bar.style.background = "linear-gradient(to right," + stops.join(",") + ")";
      legend.appendChild(document.createTextNode(E.sig(rng[0])));
      legend.appendChild(bar);
      legend.appendChild(document.createTextNode(E.sig(rng[1]) + (sc.log ? " (log)" : "")));
      legend.appendChild(el("div", {}, sc.label + "; letters: " + how));
    } else {
      Object.keys(LABELS).forEach(function (r) {
        if (!counts[r]) return;
        var sw = el("span", { "class": "swatch" }); sw.style.background = LABELS[r][1];
        legend.appendChild(sw); legend.appendChild(document.createTextNode(r + " " + counts[r]));
      });
      legend.appendChild(el("div", {}, how));
    }
  }

  function buildInfo() {
    var k = state.k, h = state.h, info = data.heads[k][h], box = $("head-info"), fit = info.fit, lk = look(info), tok = E.tok, sig = E.sig;
    box.innerHTML = "";
    box.appendChild(el("span", { "class": "headname" }, "layer " + data.layers[k] + " · head " + h + " · " + data.layer_types[k].split("_")[0]));
    var badge = el("span", { id: "role-badge", "class": "badge" }, info.label);
    badge.style.background = lk[1]; if (info.label === "other") badge.style.color = "#555";
    box.appendChild(badge);
    if (info.named_by.length && info.role !== info.label) {  /* the capture's own role, beside the detectors' name */
      box.appendChild(el("span", { id: "capture-badge", "class": "badge second" }, "on this text: " + info.role));
    }
    var dl = el("dl");
    function row(a, b) { dl.appendChild(el("dt", {}, a)); dl.appendChild(el("dd", {}, b)); }
    if (info.named_by.length) row("named by", namedText(info));
    var shown = fit.columns.slice(0, 6).map(function (j) { return j + " “" + tok(j) + "”"; }).join(", ") +
                (fit.columns.length > 6 ? " and " + (fit.columns.length - 6) + " more" : "");
    row("fit (" + Math.round(data.target * 100) + "% of mass)", fit.w < 0 ? "no band + columns of the grid reaches it (full)" :
        "band w = " + fit.w + (fit.columns.length ? ", " + fit.columns.length + " columns: " + shown : ", no columns") +
        " → " + (100 * fit.mass).toFixed(1) + "%");
    row("role (capture)", info.role + " (confidence " + sig(info.confidence) + ")");
    row("argmax offset", (info.offset > 0 ? "+" : "") + info.offset + " (positional " + sig(info.positional) + ")");
    row("sink", sig(info.sink) + " on “" + info.sink_token + "”");
    row("entropy", sig(info.entropy) + " nats (" + sig(info.entropy_norm) + " of uniform)");
    row("reach", info.reach + " tokens");
    row("top columns", info.top_columns.map(function (c) { return c[0] + " “" + tok(c[0]) + "” " + (100 * c[1]).toFixed(1) + "%"; }).join(", "));
    Object.keys(data.scores).forEach(function (key) {
      var v = data.scores[key].values[k][h];
      if (key.indexOf("det:") === 0) row("detector: " + key.slice(4), v === null ? "—" : sig(v) + (data.scores[key].threshold != null && v >= data.scores[key].threshold ? " ✓" : ""));
    });
    if (info.plan) {
      var p = info.plan;
      row("plan (" + data.plan.method + ", β " + data.plan.budget + ")", p.full ? "full head" :
          "band w = " + p.w + (p.columns.length ? ", columns " + p.columns.join(", ") : "") + (p.dynamic ? ", + " + p.dynamic + " columns per input" : ""));
    }
    box.appendChild(dl);
  }
  return { buildGrid: buildGrid, buildInfo: buildInfo };
}
