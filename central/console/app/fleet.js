// The live fleet tail: edge events over Server-Sent Events, newest on top,
// rendered as text only (euterpe.el), resuming after a cut connection.
(function () {
  "use strict";
  var E = window.euterpe;
  var body = document.getElementById("tail");
  if (!body || !E) return;
  var state = document.getElementById("tail-state");
  var max = 200;
  // An event's data is shown as its first PAGE_TEXT characters, as every
  // payload the consoles show (dconsole.PageText): one may be 64 KiB, and
  // the tail keeps 200 of them.
  var PAGE_TEXT = 4096;
  function clip(s) {
    if (s.length <= PAGE_TEXT) return s;
    var c = s.charCodeAt(PAGE_TEXT - 1), n = c >= 0xD800 && c <= 0xDBFF ? PAGE_TEXT - 1 : PAGE_TEXT;
    return s.slice(0, n) + "… truncated (" + s.length + " characters in all)";
  }
  E.sse(body.getAttribute("data-sse"), {
    terminal: [],
    onState: function (s, reconnects) {
      if (s === "signed-out") { E.text(state, "signed out: reload the page to sign in again"); return; }
      E.text(state, s + (reconnects ? " (reconnected " + reconnects + "×)" : ""));
    },
    onEvent: function (ev) {
      if (ev.type !== "edge_event") return;
      var e = ev.data;
      if (!e || typeof e !== "object") return;
      var jobURL = "/ui/fleet/job?edge=" + encodeURIComponent(e.edge_id) + "&id=" + encodeURIComponent(e.job_id);
      var row = E.el("tr", {},
        E.el("td", {}, new Date(e.received_at).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z")),
        E.el("td", { className: "mono" }, e.edge_id),
        E.el("td", {}, E.el("a", { href: jobURL, className: "mono" }, e.job_id)),
        E.el("td", {}, e.type + (e.step ? " " + e.step : "")),
        E.el("td", { className: "hide-sm mono" }, e.data === undefined ? "" : clip(JSON.stringify(e.data))));
      body.insertBefore(row, body.firstChild);
      while (body.children.length > max) body.removeChild(body.lastChild);
    }
  });
})();
