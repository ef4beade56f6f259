// The console's one script: safe DOM building (text only, never HTML from
// data), a Server-Sent Events reader that resumes with Last-Event-ID and
// stops on a terminal event, JSON requests that carry the CSRF token, and
// small SVG charts fed by the daemon's in-memory history.
"use strict";
(function () {
  var SVG = "http://www.w3.org/2000/svg";

  // el builds an element. props: className, text, and attributes; an
  // attribute whose name starts with "on" is refused (no handlers from
  // data). Children are nodes or values shown as text.
  function el(tag, props) {
    var n = document.createElement(tag);
    setProps(n, props);
    for (var i = 2; i < arguments.length; i++) append(n, arguments[i]);
    return n;
  }
  function setProps(n, props) {
    if (!props) return;
    Object.keys(props).forEach(function (k) {
      var v = props[k];
      if (v === undefined || v === null || v === false) return;
      if (/^on/i.test(k)) throw new Error("event handler attributes are not allowed: " + k);
      if (k === "className") n.setAttribute("class", String(v));
      else if (k === "text") n.textContent = String(v);
      else n.setAttribute(k, String(v));
    });
  }
  function append(n, c) {
    if (c === undefined || c === null || c === false) return;
    if (Array.isArray(c)) { c.forEach(function (x) { append(n, x); }); return; }
    n.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  function text(n, v) { n.textContent = v === undefined || v === null ? "" : String(v); return n; }
  function clear(n) { while (n.firstChild) n.removeChild(n.firstChild); return n; }
  function pretty(v) { return v === undefined || v === null ? "" : JSON.stringify(v, null, 2); }

  function fmtBytes(b) {
    if (b === null || b === undefined || isNaN(b)) return "";
    var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (Math.abs(b) >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(1) : String(b)) + " " + u[i];
  }
  function fmtDuration(ms) {
    if (ms === null || ms === undefined || isNaN(ms) || ms < 0) return "";
    if (ms < 1000) return Math.round(ms) + " ms";
    var s = ms / 1000;
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
    var m = Math.floor(s / 60);
    if (m < 60) return m + " min " + Math.round(s % 60) + " s";
    var h = Math.floor(m / 60);
    if (h < 48) return h + " h " + (m % 60) + " min";
    return Math.floor(h / 24) + " d";
  }
  function fmtAge(ms) { return fmtDuration(Date.now() - ms) + " ago"; }

  function csrfToken() {
    var m = document.querySelector('meta[name="csrf-token"]');
    return m ? m.getAttribute("content") : "";
  }

  // api sends a JSON request to the same origin; it resolves to
  // {status, body} (body parsed when JSON) and never rejects on an HTTP
  // error status.
  function api(method, url, body, headers) {
    var h = { "Accept": "application/json" };
    if (body !== undefined) h["Content-Type"] = "application/json";
    var t = csrfToken();
    if (t) h["X-CSRF-Token"] = t;
    Object.keys(headers || {}).forEach(function (k) { h[k] = headers[k]; });
    return fetch(url, {
      method: method, headers: h, credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body)
    }).then(function (r) {
      return r.text().then(function (t) {
        var parsed = t;
        try { parsed = t ? JSON.parse(t) : null; } catch (e) { /* not JSON */ }
        return { status: r.status, body: parsed, headers: r.headers };
      });
    });
  }
  function errorText(res) {
    var b = res && res.body;
    if (b && b.error) return res.status + " " + (b.error.code || "") + ": " + (b.error.message || "");
    return "HTTP " + (res ? res.status : "?");
  }

  // Stream ids are "ms-seq" (Redis) or integers; compare numerically.
  function idAfter(a, b) {
    if (!b) return true;
    var pa = String(a).split("-"), pb = String(b).split("-");
    for (var i = 0; i < Math.max(pa.length, pb.length); i++) {
      var x = Number(pa[i] || 0), y = Number(pb[i] || 0);
      if (x !== y) return x > y;
    }
    return false;
  }

  // sse follows url. opts: onEvent({id,type,data}), onState(state) with
  // "open" | "reconnecting" | "closed" | "gone" | "signed-out" | "failed", terminal (event types
  // that end the stream, default done/error/canceled), lastEventId to
  // start after. Reconnects resume with Last-Event-ID; an entry at or
  // before the last one seen is dropped, so a resume shows no duplicate.
  // Returns {close(), drop() (cut the connection; it resumes), lastId()}.
  function sse(url, opts) {
    opts = opts || {};
    var terminal = opts.terminal || ["done", "error", "canceled"];
    var last = opts.lastEventId || "";
    var closed = false, ctrl = null, delay = 500, reconnects = 0;
    function state(s) { if (opts.onState) opts.onState(s, reconnects); }
    function finish(s) { closed = true; if (ctrl) ctrl.abort(); state(s); }
    function dispatch(frame) {
      if (!frame.type && frame.data === "") return;
      var type = frame.type || "message";
      if (frame.id) {
        if (!idAfter(frame.id, last)) return;
        last = frame.id;
      }
      var data = frame.data;
      try { data = JSON.parse(frame.data); } catch (e) { /* keep text */ }
      if (opts.onEvent) opts.onEvent({ id: frame.id, type: type, data: data });
      if (terminal.indexOf(type) >= 0) finish("closed");
      // The server gives up on a stream it cannot read with a stream_error
      // that carries no id; reconnecting would only meet it again.
      else if (type === "stream_error" && !frame.id) finish("failed");
    }
    function connect() {
      if (closed) return;
      ctrl = new AbortController();
      var h = { "Accept": "text/event-stream" };
      if (last) h["Last-Event-ID"] = last;
      fetch(url, { headers: h, signal: ctrl.signal, cache: "no-store", credentials: "same-origin" }).then(function (r) {
        if (r.status === 404 || r.status === 410) { finish("gone"); return; }
        // The session ended (signed out elsewhere, expired, the operator
        // disabled): asking again would only be refused again.
        if (r.status === 401 || r.status === 403) { finish("signed-out"); return; }
        if (!r.ok || !r.body) throw new Error("HTTP " + r.status);
        state("open");
        delay = 500;
        var reader = r.body.getReader(), dec = new TextDecoder(), buf = "", frame = { data: "" , lines: 0 };
        function pump() {
          return reader.read().then(function (res) {
            if (res.done) return;
            buf += dec.decode(res.value, { stream: true });
            var i;
            while ((i = buf.search(/\r?\n/)) >= 0) {
              var line = buf.slice(0, i);
              buf = buf.slice(i + (buf[i] === "\r" ? 2 : 1));
              if (line === "") {
                if (frame.lines) dispatch(frame);
                frame = { data: "", lines: 0 };
                if (closed) return;
                continue;
              }
              if (line[0] === ":") continue;
              var c = line.indexOf(":"), f = c < 0 ? line : line.slice(0, c), v = c < 0 ? "" : line.slice(c + 1);
              if (v[0] === " ") v = v.slice(1);
              frame.lines++;
              if (f === "data") frame.data = frame.data ? frame.data + "\n" + v : v;
              else if (f === "event") frame.type = v;
              else if (f === "id") frame.id = v;
              else if (f === "retry" && /^\d+$/.test(v)) delay = Number(v);
            }
            return pump();
          });
        }
        return pump();
      }).catch(function () { /* a cut connection: resume below */ }).then(function () {
        if (closed) return;
        reconnects++;
        state("reconnecting");
        setTimeout(connect, delay);
        delay = Math.min(delay * 2, 10000);
      });
    }
    connect();
    return {
      close: function () { finish("closed"); },
      drop: function () { if (ctrl) ctrl.abort(); },
      lastId: function () { return last; }
    };
  }

  function svg(tag, attrs) {
    var n = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { n.setAttribute(k, String(attrs[k])); });
    return n;
  }
  function svgText(x, y, s, anchor) {
    var t = svg("text", { x: x, y: y, "text-anchor": anchor || "start" });
    t.textContent = s;
    return t;
  }
  function fmtNum(v) {
    if (Math.abs(v) >= 1000) return (v / 1000).toFixed(1) + "k";
    if (Math.abs(v) >= 10 || v === Math.round(v)) return String(Math.round(v));
    return v.toFixed(2);
  }

  // lineChart draws points [[unixSeconds, value], ...] into container.
  function lineChart(container, points, opts) {
    opts = opts || {};
    var W = 600, H = 160, L = 40, B = 18, T = 8;
    var s = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": opts.label || "chart" });
    s.appendChild(svg("line", { "class": "axis", x1: L, y1: H - B, x2: W, y2: H - B }));
    if (!points || points.length === 0) {
      s.appendChild(svgText(W / 2, H / 2, "no samples yet", "middle"));
    } else {
      var t0 = points[0][0], t1 = points[points.length - 1][0];
      if (opts.span) t0 = t1 - opts.span;
      var max = 0;
      points.forEach(function (p) { if (p[1] > max) max = p[1]; });
      if (max <= 0) max = 1;
      var dx = Math.max(t1 - t0, 1);
      var d = points.filter(function (p) { return p[0] >= t0; }).map(function (p, i) {
        var x = L + (p[0] - t0) / dx * (W - L - 4), y = T + (1 - p[1] / max) * (H - B - T);
        return (i ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1);
      }).join(" ");
      s.appendChild(svg("path", { "class": "line", d: d }));
      s.appendChild(svgText(L - 4, T + 8, fmtNum(max), "end"));
      s.appendChild(svgText(L - 4, H - B, "0", "end"));
      s.appendChild(svgText(L, H - 4, Math.round((t1 - t0) / 60) + " min ago"));
      s.appendChild(svgText(W, H - 4, "now " + fmtNum(points[points.length - 1][1]) + (opts.unit ? " " + opts.unit : ""), "end"));
    }
    clear(container).appendChild(s);
  }

  // barChart draws bars [{label, value}, ...] (a histogram's buckets).
  function barChart(container, bars, opts) {
    opts = opts || {};
    var W = 600, H = 160, B = 18, T = 12;
    var s = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": opts.label || "histogram" });
    s.appendChild(svg("line", { "class": "axis", x1: 0, y1: H - B, x2: W, y2: H - B }));
    var max = 0;
    (bars || []).forEach(function (b) { if (b.value > max) max = b.value; });
    if (!bars || bars.length === 0 || max === 0) {
      s.appendChild(svgText(W / 2, H / 2, "no samples yet", "middle"));
    } else {
      var w = W / bars.length;
      bars.forEach(function (b, i) {
        var h = b.value / max * (H - B - T);
        s.appendChild(svg("rect", { "class": "bar", x: i * w + 2, y: H - B - h, width: Math.max(w - 4, 1), height: h }));
        if (b.value > 0) s.appendChild(svgText(i * w + w / 2, H - B - h - 2, fmtNum(b.value), "middle"));
        s.appendChild(svgText(i * w + w / 2, H - 4, b.label, "middle"));
      });
    }
    clear(container).appendChild(s);
  }

  // charts finds elements with data-history (the JSON URL) and
  // data-series (a series name), draws them and refreshes every
  // data-refresh seconds (default 10). data-kind="histogram" draws the
  // histogram of that name as bars.
  function charts(root) {
    var nodes = (root || document).querySelectorAll("[data-history][data-series]");
    var byURL = {};
    Array.prototype.forEach.call(nodes, function (n) {
      var u = n.getAttribute("data-history");
      (byURL[u] = byURL[u] || []).push(n);
    });
    Object.keys(byURL).forEach(function (u) {
      // A history that does not come (the daemon restarting, the network
      // gone, the session ended) leaves the charts drawn dimmed, or says
      // so where none is drawn yet; the next refresh draws them again.
      function unavailable() {
        byURL[u].forEach(function (n) {
          n.classList.add("stale");
          n.setAttribute("data-chart-state", "unavailable");
          if (!n.querySelector("svg")) clear(n).appendChild(el("p", { className: "muted chart-note" }, "history unavailable; retrying"));
        });
      }
      function draw() {
        api("GET", u).then(function (res) {
          if (res.status !== 200 || !res.body) { unavailable(); return; }
          byURL[u].forEach(function (n) {
            n.classList.remove("stale");
            n.removeAttribute("data-chart-state");
            var name = n.getAttribute("data-series");
            if (n.getAttribute("data-kind") === "histogram") {
              var h = (res.body.histograms || {})[name];
              barChart(n, h ? h.buckets : [], { label: name });
            } else {
              var sr = (res.body.series || {})[name];
              lineChart(n, sr ? sr.points : [], { label: name, unit: sr && sr.unit, span: res.body.span_s });
            }
          });
        }, unavailable);
      }
      draw();
      var every = Number(byURL[u][0].getAttribute("data-refresh") || 10);
      setInterval(draw, every * 1000);
    });
  }

  window.euterpe = {
    el: el, text: text, clear: clear, pretty: pretty, api: api, errorText: errorText, sse: sse,
    idAfter: idAfter, lineChart: lineChart, barChart: barChart, charts: charts,
    fmtBytes: fmtBytes, fmtDuration: fmtDuration, fmtAge: fmtAge, csrfToken: csrfToken
  };
  document.addEventListener("DOMContentLoaded", function () { charts(document); });
})();
