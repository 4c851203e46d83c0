/* attnlab pages — the few DOM helpers both explorers use (inlined before each page's renderer). */
function $(id) { return document.getElementById(id); }
function el(tag, attrs, text) {  /* an element with attributes and text */
  var e = document.createElement(tag);
  for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function fillSelect(sel, values, labels, current) {  /* the options of a <select>, ``current`` chosen */
  sel.innerHTML = "";
  values.forEach(function (v, i) {
    var o = el("option", { value: String(v) }, labels[i]);
    if (String(v) === String(current)) o.selected = true;
    sel.appendChild(o);
  });
}
function range(n) { var r = []; for (var i = 0; i < n; i++) r.push(i); return r; }
function clip(s, n) { return s.length > n ? s.slice(0, n - 1) + "…" : s; }
