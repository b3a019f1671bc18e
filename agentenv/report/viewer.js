// The trajectory viewer of an agentenv report: filter the episodes of the index, list
// them a page at a time, open one turn by turn. Episodes not embedded in the page are
// loaded from the sidecar pages next to it with a <script> element (a file:// page may
// not fetch()). Everything from a run is untrusted text: it reaches the page through
// textContent and element attributes set one by one, never as markup.
(function () {
  "use strict";

  var ROWS_PER_PAGE = 50;
  var SHOWN_CHARS = 4000; // longer texts show this much, with a button for the rest

  function byId(id) { return document.getElementById(id); }
  function readJSON(id) { var el = byId(id); return el ? JSON.parse(el.textContent) : null; }

  var index = readJSON("ae-index");
  var details = readJSON("ae-sample") || {};
  if (!index) { return; }
  var cols = index.cols, strings = index.strings;
  var waiting = {}; // sidecar page -> callbacks
  var state = { rows: [], page: 0, open: null };

  window.AgentenvReport = {
    page: function (n, list) {
      for (var i = 0; i < list.length; i++) { details[n * index.page_size + i] = list[i]; }
      var callbacks = waiting[n] || [];
      delete waiting[n];
      callbacks.forEach(function (cb) { cb(null); });
    }
  };

  // -- small DOM helpers -------------------------------------------------------------

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === "text") { node.textContent = attrs[k]; }
        else if (k === "cls") { node.className = attrs[k]; }
        else { node.setAttribute(k, attrs[k]); }
      });
    }
    (children || []).forEach(function (c) { if (c) { node.appendChild(c); } });
    return node;
  }

  // Control characters would vanish or garble the layout: show them as their symbols.
  function visible(text) {
    return String(text).replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/g, function (c) {
      var code = c.charCodeAt(0);
      return String.fromCharCode(code === 0x7f ? 0x2421 : 0x2400 + code);
    });
  }

  function pre(text, cls) {
    var full = visible(text);
    var node = el("pre", { cls: cls || "" });
    if (full.length <= SHOWN_CHARS) { node.textContent = full; return node; }
    node.textContent = full.slice(0, SHOWN_CHARS);
    var wrap = el("div", { cls: "long" }, [node]);
    var more = el("button", { type: "button", text: "show all " + full.length.toLocaleString() + " characters" });
    more.addEventListener("click", function () { node.textContent = full; more.remove(); });
    wrap.appendChild(more);
    return wrap;
  }

  function json(value) { return JSON.stringify(value, null, 1); }
  function num(v, digits) { return v === null || v === undefined ? "-" : (+v).toFixed(digits); }

  // -- filtering -----------------------------------------------------------------------

  function fill(select, values, label) {
    select.appendChild(el("option", { value: "", text: label }));
    values.forEach(function (v, i) { select.appendChild(el("option", { value: String(i), text: v })); });
  }

  function setUpFilters() {
    fill(byId("f-source"), strings.source, "any source");
    fill(byId("f-env"), strings.env, "any env");
    fill(byId("f-family"), strings.family, "any family");
    fill(byId("f-failure"), strings.failure, "any failure kind");
    if (strings.source.length < 2) { byId("f-source").hidden = true; }
    var steps = cols.step, lo = Infinity, hi = -Infinity;
    for (var i = 0; i < steps.length; i++) { lo = Math.min(lo, steps[i]); hi = Math.max(hi, steps[i]); }
    if (steps.length) {
      byId("f-step-from").placeholder = "from step " + lo;
      byId("f-step-to").placeholder = "to step " + hi;
    }
    ["f-source", "f-env", "f-family", "f-success", "f-failure", "f-step-from", "f-step-to", "f-task"].forEach(
      function (id) { byId(id).addEventListener("input", function () { state.page = 0; apply(); }); }
    );
    byId("f-prev").addEventListener("click", function () { state.page -= 1; list(); });
    byId("f-next").addEventListener("click", function () { state.page += 1; list(); });
  }

  function apply() {
    var source = byId("f-source").value, env = byId("f-env").value, family = byId("f-family").value;
    var success = byId("f-success").value, failure = byId("f-failure").value;
    var from = byId("f-step-from").value, to = byId("f-step-to").value;
    var task = byId("f-task").value.trim().toLowerCase();
    var taskMatch = null;
    if (task) {
      taskMatch = strings.task.map(function (t) { return t.toLowerCase().indexOf(task) >= 0; });
    }
    var rows = [];
    for (var i = 0; i < index.episodes; i++) {
      if (source !== "" && cols.source[i] !== +source) { continue; }
      if (env !== "" && cols.env[i] !== +env) { continue; }
      if (family !== "" && cols.family[i] !== +family) { continue; }
      if (failure !== "" && cols.failure[i] !== +failure) { continue; }
      if (success !== "" && cols.success[i] !== +success) { continue; }
      if (from !== "" && cols.step[i] < +from) { continue; }
      if (to !== "" && cols.step[i] > +to) { continue; }
      if (taskMatch && !taskMatch[cols.task[i]]) { continue; }
      rows.push(i);
    }
    state.rows = rows;
    list();
  }

  function list() {
    var pages = Math.max(1, Math.ceil(state.rows.length / ROWS_PER_PAGE));
    state.page = Math.min(Math.max(state.page, 0), pages - 1);
    byId("f-count").textContent = state.rows.length.toLocaleString() + " of " +
      index.episodes.toLocaleString() + " episodes";
    byId("f-page").textContent = "page " + (state.page + 1) + " of " + pages;
    byId("f-prev").disabled = state.page === 0;
    byId("f-next").disabled = state.page >= pages - 1;
    var body = byId("ae-rows");
    body.textContent = "";
    state.rows.slice(state.page * ROWS_PER_PAGE, (state.page + 1) * ROWS_PER_PAGE).forEach(function (row) {
      var tr = el("tr", { "data-row": String(row), tabindex: "0" }, [
        el("td", { text: String(row) }),
        el("td", { text: String(cols.step[row]) }),
        el("td", { text: strings.source[cols.source[row]] }),
        el("td", { text: strings.env[cols.env[row]] }),
        el("td", { text: visible(strings.task[cols.task[row]]) }),
        el("td", { text: cols.success[row] ? "yes" : "no", cls: cols.success[row] ? "ok" : "bad" }),
        el("td", { text: strings.failure[cols.failure[row]] }),
        el("td", { text: String(cols.turns[row]) }),
        el("td", { text: num(cols.reward[row], 3) }),
        el("td", { text: row in details ? "" : "lazy", cls: "muted" })
      ]);
      if (row === state.open) { tr.className = "open"; }
      tr.addEventListener("click", function () { open(row); });
      tr.addEventListener("keydown", function (e) { if (e.key === "Enter") { open(row); } });
      body.appendChild(tr);
    });
  }

  // -- loading and showing one episode ------------------------------------------------

  function load(row, done) {
    if (row in details) { done(null); return; }
    if (!index.sidecar) {
      done("this episode is not embedded, and the report was written without sidecar pages; its record is " +
        strings.file[cols.file[row]] + " line " + cols.line[row]);
      return;
    }
    var page = Math.floor(row / index.page_size);
    if (waiting[page]) { waiting[page].push(done); return; }
    waiting[page] = [done];
    var file = index.sidecar + "episodes-" + String(page).padStart(5, "0") + ".js";
    var script = document.createElement("script");
    script.src = file;
    script.onerror = function () {
      var callbacks = waiting[page] || [];
      delete waiting[page];
      callbacks.forEach(function (cb) {
        cb("could not load " + file + ": keep that folder next to the report (it holds the episodes not embedded)");
      });
    };
    document.head.appendChild(script);
  }

  function open(row) {
    state.open = row;
    var panel = byId("ae-episode");
    panel.textContent = "";
    panel.appendChild(el("p", { cls: "muted", text: "loading episode " + row + "…" }));
    load(row, function (error) {
      if (state.open !== row) { return; }
      panel.textContent = "";
      if (error) { panel.appendChild(el("p", { cls: "error", text: error })); return; }
      panel.appendChild(render(row, details[row]));
      if (history.replaceState) { history.replaceState(null, "", "#episode=" + row); }
    });
    list();
  }

  function fact(label, value, cls) {
    return el("span", { cls: "fact " + (cls || "") }, [el("b", { text: label + " " }), el("span", { text: value })]);
  }

  function render(row, d) {
    var box = el("article", { cls: "episode", "data-row": String(row) });
    box.appendChild(el("h3", { text: "episode " + row + " · " + visible(d.task.id) }));
    var facts = el("div", { cls: "facts" }, [
      fact("env", String(d.env)),
      fact(d.source, "step " + d.step),
      fact("seed", String(d.seed)),
      fact("solved", d.success ? "yes" : "no", d.success ? "ok" : "bad"),
      fact("failure", d.failure),
      fact("task reward", num(d.task_reward, 3)),
      fact("total reward", num(d.total_reward, 3)),
      fact("turns", String(d.steps.length + d.more_steps)),
      fact("time", num(d.duration_s, 2) + " s"),
      fact("family", visible(d.task.family) + " · difficulty " + d.task.difficulty),
      fact("raw", d.where)
    ]);
    box.appendChild(facts);
    if (d.error) { box.appendChild(pre("error: " + d.error, "error")); }
    var msgs = d.messages || [];
    var assistant = [];
    msgs.forEach(function (m, i) { if (m && m.role === "assistant") { assistant.push(i); } });
    // The last len(steps) assistant messages are this episode's actions; earlier ones came
    // with the snapshot it resumed from.
    var offset = assistant.length - d.steps.length;
    var firstAction = assistant.length ? assistant[Math.max(offset, 0)] : msgs.length;
    var intro = el("details", { cls: "intro" }, [el("summary", { text: "prompt and earlier conversation (" + firstAction + " messages)" })]);
    msgs.slice(0, firstAction).forEach(function (m) { intro.appendChild(message(m)); });
    if (firstAction === 0 && d.task.prompt) { intro.appendChild(pre(d.task.prompt)); }
    box.appendChild(intro);
    d.steps.forEach(function (s, k) {
      var at = offset + k >= 0 && offset + k < assistant.length ? assistant[offset + k] : -1;
      var next = offset + k + 1 < assistant.length ? assistant[offset + k + 1] : msgs.length;
      var observations = at >= 0 ? msgs.slice(at + 1, next) : [];
      box.appendChild(turn(s, at >= 0 ? msgs[at] : null, observations));
    });
    if (d.more_steps) { box.appendChild(el("p", { cls: "muted", text: d.more_steps + " more steps in " + d.where })); }
    var raw = el("details", { cls: "raw record" }, [el("summary", { text: "raw record (JSON)" })]);
    raw.addEventListener("toggle", function () {
      if (raw.open && raw.childNodes.length === 1) { raw.appendChild(pre(json(d))); }
    });
    box.appendChild(raw);
    return box;
  }

  function message(m) {
    var who = String(m.role) + (m.name ? " · " + m.name : "") + (m.tool_call_id ? " · " + m.tool_call_id : "");
    var content = typeof m.content === "string" ? m.content : json(m.content);
    return el("div", { cls: "msg " + String(m.role) }, [el("div", { cls: "who", text: who }), pre(content)]);
  }

  function turn(s, action, observations) {
    var rewards = Object.assign({}, s.rewards || {}, s.task_rewards || {});
    var head = el("div", { cls: "turn-head" }, [el("b", { text: "turn " + s.turn })]);
    Object.keys(rewards).forEach(function (k) {
      var v = rewards[k];
      head.appendChild(el("span", { cls: "chip " + (v > 0 ? "ok" : v < 0 ? "bad" : ""), text: k + " " + num(v, 3) }));
    });
    if (s.tokens !== null && s.tokens !== undefined) {
      head.appendChild(el("span", { cls: "chip muted", text: s.tokens + " tokens · " + (s.finish_reason || "?") }));
    }
    var box = el("section", { cls: "turn" }, [head]);
    if (s.error) { box.appendChild(pre((s.error_kind || "error") + ": " + s.error, "error")); }
    var text = action && typeof action.content === "string" ? action.content : typeof s.action === "string" ? s.action : "";
    if (text) { box.appendChild(el("div", { cls: "label", text: "action" })); box.appendChild(pre(text, "action")); }
    (s.calls || []).forEach(function (c) {
      var name = c && typeof c === "object" ? String(c.name) : String(c);
      var args = c && typeof c === "object" ? json(c.arguments) : "";
      box.appendChild(el("div", { cls: "call" }, [el("code", { text: visible(name) }), pre(args, "args")]));
    });
    observations.forEach(function (m) { box.appendChild(message(m)); });
    if (s.state_diff && s.state_diff.length) {
      var table = el("table", { cls: "diff" }, [el("tr", {}, [el("th", { text: "op" }), el("th", { text: "path" }), el("th", { text: "value" })])]);
      s.state_diff.forEach(function (op) {
        var o = op && typeof op === "object" ? op : { op: "?", path: "", value: op };
        table.appendChild(el("tr", {}, [
          el("td", { text: String(o.op) }), el("td", { text: visible(String(o.path)) }),
          el("td", {}, ["value" in o ? pre(json(o.value)) : el("span", { text: "" })])
        ]));
      });
      box.appendChild(el("div", { cls: "label", text: "state diff" }));
      box.appendChild(table);
    }
    var raw = el("details", { cls: "raw" }, [el("summary", { text: "raw action" })]);
    raw.appendChild(pre(typeof s.action === "string" ? s.action : json(s.action)));
    box.appendChild(raw);
    return box;
  }

  setUpFilters();
  apply();
  var wanted = /^#episode=(\d+)$/.exec(location.hash);
  if (wanted && +wanted[1] < index.episodes) { open(+wanted[1]); }
  document.documentElement.setAttribute("data-ready", "1");
})();
