// euterpe-edge console pages: submit, the live job page, cancel, library
// deletion and thumbnails. Everything shown is set with textContent.
"use strict";
(function () {
  var E = window.euterpe;
  var $ = function (sel, root) { return (root || document).querySelector(sel); };

  // cut returns at most n UTF-16 units of s without splitting a
  // surrogate pair (half of one would show as U+FFFD).
  function cut(s, n) {
    if (s.length <= n) return s;
    var c = s.charCodeAt(n - 1);
    return s.slice(0, c >= 0xD800 && c <= 0xDBFF ? n - 1 : n);
  }

  // A result, error or event's data shows its first PAGE_TEXT characters,
  // as the server clips what it renders (console.PageText): the API
  // returns them whole, and a worker may store megabytes.
  var PAGE_TEXT = 4096;
  function clip(s) {
    if (typeof s !== "string" || s.length <= PAGE_TEXT) return s;
    return cut(s, PAGE_TEXT) + "\n… truncated (" + s.length + " characters in all)";
  }

  // tail returns at most the last n UTF-16 units of s without splitting a
  // surrogate pair.
  function tail(s, n) {
    if (s.length <= n) return s;
    var c = s.charCodeAt(s.length - n);
    return s.slice(c >= 0xDC00 && c <= 0xDFFF ? s.length - n + 1 : s.length - n);
  }

  // A job's streamed answer may reach EUTERPE_LLM_MAX_TEXT_BYTES (64 MiB):
  // the page keeps its last STREAM_TEXT characters (256 Ki), and the
  // events table its last MAX_ROWS rows, so a long job cannot exhaust the
  // tab. The whole answer is the job's result (GET /v1/jobs/{id}).
  var STREAM_TEXT = 262144, MAX_ROWS = 500;

  // NO_ANSWER is what a button says when its request got no answer at
  // all (the edge down, the network gone): the button is usable again.
  var NO_ANSWER = "the edge did not answer; try again";

  // Error text comes from the worker side, which may cap nothing: every
  // string in it is cut to 512 characters, as the server caps the error
  // it renders into the page.
  var MAX_MESSAGE = 512;
  function capStrings(v) {
    if (typeof v === "string") return cut(v, MAX_MESSAGE);
    if (Array.isArray(v)) return v.map(capStrings);
    if (v && typeof v === "object") {
      var out = {};
      Object.keys(v).forEach(function (k) { out[k] = capStrings(v[k]); });
      return out;
    }
    return v;
  }

  function submitForm(form) {
    var out = $("#submit-result");
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var payload;
      try { payload = JSON.parse($("#payload").value); } catch (e) {
        E.text(out, "The payload is not valid JSON: " + e.message); out.className = "error-msg"; return;
      }
      var body = { task: $("#task").value, payload: payload };
      var ttl = $("#ttl").value.trim();
      if (ttl) body.ttl_s = Number(ttl);
      var h = {};
      var key = $("#idem").value.trim();
      if (key) h["Idempotency-Key"] = key;
      $("#submit").disabled = true;
      E.api("POST", "/v1/jobs", body, h).then(function (res) {
        $("#submit").disabled = false;
        if (res.status === 202 && res.body && res.body.job_id) {
          window.location.assign("/ui/jobs/" + encodeURIComponent(res.body.job_id));
          return;
        }
        E.text(out, E.errorText(res)); out.className = "error-msg";
      }, function () {
        $("#submit").disabled = false;
        E.text(out, NO_ANSWER); out.className = "error-msg";
      });
    });
  }

  function jobPage(card) {
    var id = card.getAttribute("data-job-id");
    var tbody = $("#events tbody"), state = $("#stream-state"), status = $("#status"), text = $("#stream-text");
    // The streamed text grows by appending to one text node: rebuilding
    // it on each delta costs the whole text again every time.
    var cutNote = E.el("span", { className: "muted", id: "stream-text-cut" }), streamed = document.createTextNode(""), total = 0;
    text.appendChild(cutNote); text.appendChild(streamed);
    function addText(s) {
      total += s.length;
      streamed.appendData(tail(s, STREAM_TEXT));
      // Cut back to STREAM_TEXT once it is a quarter over, not on each
      // delta: each cut copies what is kept.
      if (streamed.length > STREAM_TEXT + STREAM_TEXT / 4) {
        var keep = tail(streamed.data, STREAM_TEXT);
        streamed.deleteData(0, streamed.length - keep.length);
      }
      if (total > streamed.length) {
        E.text(cutNote, "… earlier text not shown (" + total + " characters in all; the whole answer is the job's result)\n");
      }
    }
    // A job delivered again (its worker gone mid-answer) runs from the
    // start and streams the whole text again after the deltas of the
    // attempt that died: its running event with delivery > 1 starts the
    // text over.
    function restartText() {
      total = 0;
      streamed.deleteData(0, streamed.length);
      E.text(cutNote, "");
    }
    var rowsNote = null, dropped = 0;
    function addRow(row) {
      tbody.appendChild(row);
      if (tbody.rows.length <= MAX_ROWS) return;
      tbody.removeChild(tbody.rows[0]);
      dropped++;
      if (!rowsNote) {
        rowsNote = E.el("p", { className: "muted", id: "events-cut" });
        $("#events").parentNode.insertAdjacentElement("beforebegin", rowsNote);
      }
      E.text(rowsNote, "Showing the last " + MAX_ROWS + " events; " + dropped + " earlier ones are not shown.");
    }
    function setStatus(s) { E.text(status, s); status.className = "badge s-" + s; card.setAttribute("data-status", s); }
    window.jobStream = E.sse("/v1/jobs/" + encodeURIComponent(id) + "/events", {
      onEvent: function (ev) {
        if (ev.type === "hello") return;
        var d = ev.data && typeof ev.data === "object" ? ev.data : {};
        var row = E.el("tr", { "data-entry": ev.id, "data-type": ev.type },
          E.el("td", { className: "mono" }, ev.id),
          E.el("td", null, E.el("span", { className: "badge s-" + ev.type }, ev.type)),
          E.el("td", { className: "hide-sm mono" }, d.step || ""),
          E.el("td", null, E.el("pre", null, clip(E.pretty(ev.type === "error" ? capStrings(d.data) : d.data)))));
        addRow(row);
        if (ev.type === "running" && d.data && typeof d.data.delivery === "number" && d.data.delivery > 1) restartText();
        if (ev.type === "delta" && d.data && typeof d.data.text === "string") addText(d.data.text);
        if (["queued", "started", "running", "done", "error", "canceled"].indexOf(ev.type) >= 0) {
          setStatus(ev.type === "started" ? "running" : ev.type);
        }
        if (["done", "error", "canceled"].indexOf(ev.type) >= 0) {
          var c = $("#cancel"); if (c) c.disabled = true;
          // The result or error is in the job; show it without a reload.
          E.api("GET", "/v1/jobs/" + encodeURIComponent(id)).then(function (res) {
            if (res.status !== 200 || !res.body) return;
            E.text($("#result"), clip(E.pretty(res.body.result)));
            E.text($("#error"), clip(E.pretty(capStrings(res.body.error))));
          }, function () {
            // The events shown stand; a reload shows the result.
            E.text($("#result"), "the edge did not answer; reload the page for the result");
          });
        }
      },
      onState: function (s) {
        var label = { open: "live", reconnecting: "reconnecting", closed: "ended", gone: "expired", "signed-out": "signed out", failed: "unreadable" }[s] || s;
        E.text(state, label);
        state.className = "badge " + (s === "open" ? "s-running" : s === "closed" ? "s-done" : "s-canceled");
      }
    });
    var cancel = $("#cancel");
    if (cancel) cancel.addEventListener("click", function () {
      cancel.disabled = true;
      var out = $("#cancel-result");
      E.api("POST", "/v1/jobs/" + encodeURIComponent(id) + "/cancel").then(function (res) {
        if (res.status === 200) { E.text(out, "canceled"); return; }
        cancel.disabled = false;
        E.text(out, E.errorText(res)); out.className = "error-msg";
      }, function () {
        // Unless the job ended meanwhile, which disabled the button.
        if (card.getAttribute("data-status") === "running" || card.getAttribute("data-status") === "queued") cancel.disabled = false;
        E.text(out, NO_ANSWER); out.className = "error-msg";
      });
    });
  }

  // Thumbnails are made on demand: 202 means queued, so ask again.
  function thumbnails() {
    Array.prototype.forEach.call(document.querySelectorAll("img[data-thumb]"), function (img) {
      var url = img.getAttribute("data-thumb"), tries = 0;
      function load() {
        fetch(url, { credentials: "same-origin", cache: "no-store" }).then(function (r) {
          if (r.status === 200) { img.src = url; return; }
          if (r.status === 202 && tries++ < 30) { setTimeout(load, 1000); return; }
          img.alt = "no thumbnail";
          img.replaceWith(E.el("div", { className: "muted", text: "no thumbnail (" + r.status + ")" }));
        }).catch(function () { if (tries++ < 30) setTimeout(load, 2000); });
      }
      load();
    });
  }

  function groups() {
    Array.prototype.forEach.call(document.querySelectorAll(".group"), function (g) {
      var key = g.getAttribute("data-group-key");
      var files = Array.prototype.slice.call(g.querySelectorAll(".file"));
      var btn = $(".delete-btn", g), remains = $(".remains", g), out = $(".delete-result", g);
      function split() {
        var keep = [], drop = [];
        files.forEach(function (f) {
          var del = $(".delete-box", f).checked;
          f.className = "file " + (del ? "drop" : "keep");
          (del ? drop : keep).push(f);
        });
        return { keep: keep, drop: drop };
      }
      function update() {
        var s = split();
        E.clear(remains);
        if (s.drop.length === 0) {
          E.text(remains, "Select the copies to delete; the others stay.");
        } else if (s.keep.length === 0) {
          E.text(remains, "Keep at least one copy.");
        } else {
          remains.appendChild(document.createTextNode("Will remain: "));
          s.keep.forEach(function (f, i) {
            if (i) remains.appendChild(document.createTextNode(", "));
            remains.appendChild(E.el("code", null, f.getAttribute("data-path")));
          });
        }
        btn.disabled = s.drop.length === 0 || s.keep.length === 0;
      }
      files.forEach(function (f) { $(".delete-box", f).addEventListener("change", update); });
      update();
      btn.addEventListener("click", function () {
        var s = split();
        var ids = function (l) { return l.map(function (f) { return Number(f.getAttribute("data-file-id")); }); };
        btn.disabled = true;
        E.text(out, "requesting…"); out.className = "delete-result muted";
        E.api("POST", "/api/v1/duplicates/groups/" + encodeURIComponent(key).replace(/%3A/gi, ":") + "/delete",
          { keep_file_ids: ids(s.keep), delete_file_ids: ids(s.drop) }).then(function (res) {
          if (res.status !== 202 || !res.body) { E.text(out, E.errorText(res)); out.className = "delete-result error-msg"; btn.disabled = false; return; }
          var job = res.body.id;
          E.text(out, "delete job #" + job + " queued");
          g.setAttribute("data-delete-job", job);
          follow(job, out, g, s.drop);
        }, function () {
          E.text(out, NO_ANSWER); out.className = "delete-result error-msg"; btn.disabled = false;
        });
      });
    });
  }

  // follow polls a library job until it ends. An answer that cannot change
  // (a 4xx: the job is not there) stops it and says so; an edge that does
  // not answer, or answers 5xx (the library database busy or restarting),
  // is asked again, less often, with the reason shown meanwhile.
  function follow(job, out, g, dropped, wait) {
    wait = wait || 500;
    function again(why) {
      if (why) E.text(out, "delete job #" + job + ": " + why + "; asking again");
      setTimeout(function () { follow(job, out, g, dropped, why ? Math.min(wait * 2, 10000) : 500); }, wait);
    }
    E.api("GET", "/api/v1/jobs/" + job).then(function (res) {
      var j = res.body || {};
      if (res.status === 200 && ["completed", "succeeded"].indexOf(j.status) >= 0) {
        E.text(out, "delete job #" + job + " completed: moved to the trash");
        out.className = "delete-result";
        g.setAttribute("data-delete-status", "completed");
        dropped.forEach(function (f) { f.remove(); });
        return;
      }
      if (res.status === 200 && ["failed", "cancelled"].indexOf(j.status) >= 0) {
        E.text(out, "delete job #" + job + " " + j.status + ": " + (j.error_code || "") + " " + (j.error_message || ""));
        out.className = "delete-result error-msg";
        g.setAttribute("data-delete-status", j.status);
        return;
      }
      if (res.status === 200) { again(""); return; }
      if (res.status >= 500) { again(E.errorText(res)); return; }
      E.text(out, "delete job #" + job + ": " + E.errorText(res));
      out.className = "delete-result error-msg";
      g.setAttribute("data-delete-status", "unknown");
    }, function () { again("the edge did not answer"); });
  }

  function scanButton(btn) {
    btn.addEventListener("click", function () {
      btn.disabled = true;
      var out = $("#scan-result");
      E.api("POST", "/api/v1/scans").then(function (res) {
        btn.disabled = false;
        if (res.status === 202 && res.body) { E.text(out, "scan job #" + res.body.id + " queued"); out.className = "muted"; return; }
        E.text(out, E.errorText(res)); out.className = "error-msg";
      }, function () {
        btn.disabled = false;
        E.text(out, NO_ANSWER); out.className = "error-msg";
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var f = $("#submit-form"); if (f) submitForm(f);
    var j = $("#job[data-job-id]"); if (j) jobPage(j);
    thumbnails();
    groups();
    var s = $("#scan-now"); if (s) scanButton(s);
  });
})();
