// The status page's live updates: server-sent events replace the rows
// that changed (rendered by the server), and a timer moves the lags on.
(function () {
  "use strict";
  var body = document.body;
  var offset = Number(body.dataset.now) - Date.now(); // server clock - ours
  var windowSec = Number(body.dataset.history);
  var live = document.getElementById("live");
  var banner = document.getElementById("banner");
  var tbodies = {
    tables: document.querySelector("#tables tbody"),
    runs: document.querySelector("#runs tbody")
  };

  function now() { return Date.now() + offset; }

  // fmtLag and lagBar are the server's (model.go), in JavaScript.
  function fmtLag(sec) {
    var s = Math.max(0, Math.floor(sec));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60) + "s";
    if (s < 48 * 3600) return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
  }
  function lagBar(sec) {
    if (sec <= 0) return 0;
    var f = Math.log1p(sec / 60) / Math.log1p(7 * 24 * 60);
    return Math.round(Math.min(f, 1) * 1000) / 10;
  }
  // sparkline and sparkLabel are the server's (history.go, render.go),
  // in JavaScript.
  function sparkline(moves, end) {
    if (!moves.length) return null;
    var start = Math.min(Math.max(end - windowSec, moves[0][0]), end - 10);
    var span = end - start, pts = [], i, t;
    for (i = 0; i < moves.length; i++) {
      t = Math.min(Math.max(moves[i][0], start), end);
      if (i > 0) pts.push([t, t - moves[i - 1][1]]);
      pts.push([t, t - moves[i][1]]);
    }
    pts.push([end, end - moves[moves.length - 1][1]]);
    var lo = pts[0][1], hi = pts[0][1];
    pts.forEach(function (p) { lo = Math.min(lo, p[1]); hi = Math.max(hi, p[1]); });
    var points = pts.map(function (p) {
      var y = hi > lo ? 240 - 10 - Math.floor((p[1] - lo) * 220 / (hi - lo)) : 120;
      return Math.floor((p[0] - start) * 1200 / span) + "," + y;
    }).join(" ");
    return { points: points, label: "lag from " + isoTime(start * 1000) + " to now: between " + fmtLag(lo) + " and " + fmtLag(hi) };
  }
  function parseMoves(s) {
    if (!s) return [];
    return s.split(",").map(function (m) { return m.split(":").map(Number); });
  }

  function keyed(tbody) {
    var m = new Map();
    Array.prototype.forEach.call(tbody.rows, function (tr) {
      if (tr.dataset.key !== undefined) m.set(tr.dataset.key, tr);
    });
    return m;
  }

  // apply puts the server's rows in place and, with an order, drops the
  // rows that went and sorts the rest.
  function apply(tbody, part) {
    if (!part) return;
    var rows = keyed(tbody);
    var tpl = document.createElement("template");
    tpl.innerHTML = part.rows.join("");
    Array.prototype.slice.call(tpl.content.children).forEach(function (tr) {
      var old = rows.get(tr.dataset.key);
      if (old) {
        if (old.outerHTML === tr.outerHTML) return;
        old.replaceWith(tr);
      } else {
        tbody.insertBefore(tr, tbody.querySelector("tr.empty"));
      }
      tr.classList.add("flash");
      tr.addEventListener("animationend", function () { tr.classList.remove("flash"); }, { once: true });
      rows.set(tr.dataset.key, tr);
    });
    if (part.order) {
      var keep = new Set(part.order);
      rows.forEach(function (tr, k) { if (!keep.has(k)) { tr.remove(); rows.delete(k); } });
      var empty = tbody.querySelector("tr.empty");
      part.order.forEach(function (k) { var tr = rows.get(k); if (tr) tbody.insertBefore(tr, empty); });
    }
    tbody.querySelector("tr.empty").hidden = rows.size > 0;
    tick(true);
  }

  // tick moves every table's lag on with the clock; the timelines too
  // (less often).
  var ticks = 0;
  function tick(all) {
    var t = now(), sparks = all || ticks++ % 10 === 0;
    Array.prototype.forEach.call(tbodies.tables.rows, function (tr) {
      if (tr.dataset.key === undefined) return;
      var lag = (t - Number(tr.dataset.until)) / 1000;
      var text = tr.querySelector(".lag-text"), fill = tr.querySelector(".bar .fill");
      var s = fmtLag(lag);
      if (text.textContent !== s) text.textContent = s;
      fill.setAttribute("width", String(lagBar(lag)));
      if (sparks) {
        var sp = sparkline(parseMoves(tr.dataset.moves), Math.floor(t / 1000));
        if (sp) {
          tr.querySelector(".spark polyline").setAttribute("points", sp.points);
          tr.querySelector(".spark svg").setAttribute("aria-label", sp.label);
        }
      }
    });
  }

  function isoTime(ms) {
    return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  function setLive(state, text) {
    live.dataset.state = state;
    live.textContent = text;
  }

  if (!window.EventSource) return;
  setLive("connecting", "Connecting…");
  var es = new EventSource("/status/events?since=" + encodeURIComponent(body.dataset.version));
  es.addEventListener("update", function (e) {
    var u = JSON.parse(e.data);
    offset = u.now - Date.now();
    apply(tbodies.tables, u.tables);
    apply(tbodies.runs, u.runs);
    banner.textContent = u.banner;
    banner.hidden = !u.banner;
    setLive("live", "Live: updated " + isoTime(u.now) + ".");
  });
  es.addEventListener("error", function () {
    setLive("reconnecting", "Connection lost: reconnecting… (the data shown may be old)");
  });
  tick(true);
  setInterval(function () { tick(false); }, 1000);
})();
