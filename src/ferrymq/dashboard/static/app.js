// ferrymq dashboard: one page, views chosen by the URL's hash (#/topics?q=...), data from the
// server's JSON endpoints. Everything shown is built with DOM calls and textContent, never
// from HTML strings, so names and message bodies cannot inject markup.
"use strict";

const REFRESH_MS = 5000;
const main = document.getElementById("main");
let refreshTimer = null;
let renderSeq = 0;
// GET /api/session: whether users log in, who this one is, and the CSRF token every POST carries.
let session = {login: false, user: null, csrf: ""};

// --- helpers ----------------------------------------------------------------------------------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

class ApiError extends Error {
  constructor(status, type, message) { super(message); this.status = status; this.type = type; }
}

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: {"Content-Type": "application/json", "X-CSRF-Token": session.csrf},
    body: JSON.stringify(body),
  };
  const resp = await fetch(path, init);
  let data = null;
  try { data = await resp.json(); } catch (e) { data = null; }
  if (resp.status === 401) {
    // The session ended (idle, logged out elsewhere, account changed): log in again.
    location.assign("/login");
  }
  if (!resp.ok) {
    const err = (data && data.error) || {};
    throw new ApiError(resp.status, err.type || "HttpError", err.message || resp.statusText);
  }
  return data;
}

function fmtTime(ms) {
  if (!ms || ms <= 0) return "-";
  const d = new Date(ms);
  const p = (n, w = 2) => String(n).padStart(w, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ` +
         `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

function fmtNum(n) {
  if (n === null || n === undefined) return "-";
  return Number(n).toLocaleString("en-US");
}

// replaceChildren with nested arrays flattened (it would print an array as text).
function fill(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter(c => c !== null && c !== undefined && c !== false));
  return el;
}

function link(hash, text) { return h("a", {href: hash}, text); }

function table(columns, rows, opts = {}) {
  const head = h("tr", null, columns.map(c => h("th", {class: c.num ? "num" : null}, c.title)));
  const body = rows.map(r => h("tr", opts.rowAttrs ? opts.rowAttrs(r) : null,
    columns.map(c => h("td", {class: [c.num ? "num" : "", c.mono ? "mono" : ""].join(" ").trim() || null},
      c.render ? c.render(r) : r[c.key]))));
  const t = h("table", {id: opts.id || null}, h("thead", null, head), h("tbody", null, body));
  if (!rows.length) t.append(h("tbody", null, h("tr", null,
    h("td", {colspan: columns.length, class: "muted"}, opts.empty || "nothing to show"))));
  return t;
}

function errorBox(err) {
  return h("div", {class: "error", role: "alert"}, `${err.type || "Error"}: ${err.message}`);
}

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, qs] = raw.split("?", 2);
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return {view: parts[0] || "cluster", arg: parts.slice(1).join("/"), params: new URLSearchParams(qs || "")};
}

function setHash(view, arg, params) {
  const qs = params && [...params].length ? "?" + params.toString() : "";
  location.hash = `#/${view}${arg ? "/" + encodeURIComponent(arg) : ""}${qs}`;
}

function setStatus(text) { document.getElementById("status").textContent = text; }

function schedule(fn) {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(fn, REFRESH_MS);
}

// --- cluster ----------------------------------------------------------------------------------
function replicationText(b) {
  const r = b.replication || {};
  if (b.error) return h("span", {class: "badge bad"}, "unreachable");
  if (b.broker_role === "SLAVE" || r.ha_connected !== null && r.ha_connected !== undefined) {
    const conn = r.ha_connected === null || r.ha_connected === undefined ? "" :
      (r.ha_connected ? "connected" : "disconnected");
    const lag = r.slave_lag_bytes === null || r.slave_lag_bytes === undefined ? "-" :
      `${fmtNum(r.slave_lag_bytes)} B / ${r.slave_lag_ms === null ? "-" : fmtNum(r.slave_lag_ms)} ms behind`;
    return h("span", null, h("span", {class: "badge " + (r.ha_connected ? "ok" : "warn")}, conn || "slave"), " ", lag);
  }
  const slaves = r.ha_slaves || [];
  const inSync = r.in_sync_slaves === null || r.in_sync_slaves === undefined ? "-" :
    (r.in_sync_slaves.length ? r.in_sync_slaves.join(",") : "none");
  return h("span", null, `in sync: ${inSync}`,
    slaves.map(s => h("div", {class: "muted"},
      `slave ${s.brokerId ?? "?"}: ${fmtNum(s.lagBytes)} B / ${fmtNum(s.lagMs)} ms behind` +
      (s.inSync ? " (in sync)" : " (not in sync)"))));
}

async function viewCluster(seq) {
  const data = await api("/api/cluster");
  if (seq !== renderSeq) return;
  const rows = data.brokers;
  const byCluster = {};
  for (const b of rows) (byCluster[b.cluster] = byCluster[b.cluster] || []).push(b);
  const rt = (b, k) => (b.runtime || {})[k];
  fill(main, 
    h("h1", null, "Cluster"),
    h("p", {class: "muted"}, `name server ${data.namesrv} · ${rows.length} broker(s) · refreshed ${fmtTime(Date.now())}`),
    Object.entries(byCluster).map(([cluster, brokers]) => h("div", {class: "card"},
      h("h2", null, `cluster ${cluster}`),
      table([
        {title: "broker", render: b => b.broker},
        {title: "id", num: true, render: b => b.broker_id},
        {title: "role", render: b => h("span", {class: "badge " + (b.role === "MASTER" ? "master" : "slave")},
          b.broker_role || b.role)},
        {title: "address", mono: true, render: b => b.addr},
        {title: "version", render: b => rt(b, "brokerVersionDesc") || "-"},
        {title: "commit log max offset", num: true, render: b => fmtNum(rt(b, "commitLogMaxOffset"))},
        {title: "put tps", num: true, render: b => (rt(b, "putTps") || "-").split(" ")[0]},
        {title: "get tps", num: true, render: b => (rt(b, "getTransferedTps") || rt(b, "getFoundTps") || "-").split(" ")[0]},
        {title: "replication", render: replicationText},
        {title: "error", render: b => b.error || ""},
      ], brokers, {id: "brokers", rowAttrs: b => ({"data-addr": b.addr})}))),
  );
  schedule(() => render());
}

// --- topics -----------------------------------------------------------------------------------
async function viewTopics(seq, params) {
  const q = params.get("q") || "";
  const kind = params.get("kind") || "normal";
  const offset = Number(params.get("offset") || 0);
  const limit = Number(params.get("limit") || 50);
  const qs = new URLSearchParams({q, kind, offset: String(offset), limit: String(limit)});
  const data = await api("/api/topics?" + qs);
  if (seq !== renderSeq) return;
  const go = (changes) => {
    const p = new URLSearchParams({q, kind, offset: String(offset), limit: String(limit)});
    for (const [k, v] of Object.entries(changes)) p.set(k, String(v));
    setHash("topics", "", p);
  };
  const search = h("input", {type: "search", id: "topic-filter", placeholder: "filter topics", value: q});
  let typing = null;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => go({q: search.value, offset: 0}), 250);
  });
  const kinds = h("select", {id: "topic-kind", onchange: e => go({kind: e.target.value, offset: 0})},
    ["normal", "retry", "dlq", "system", "all"].map(k => h("option", {value: k, selected: k === kind},
      `${k} (${k === "all" ? Object.values(data.kinds).reduce((a, b) => a + b, 0) : (data.kinds[k] || 0)})`)));
  const last = Math.min(data.offset + data.topics.length, data.total);
  const pager = h("div", {class: "pager"},
    h("button", {class: "secondary", disabled: data.offset === 0, onclick: () => go({offset: Math.max(0, data.offset - data.limit)})}, "‹ previous"),
    h("span", {id: "topic-range"}, data.total ? `${data.offset + 1}–${last} of ${data.total}` : "0 topics"),
    h("button", {class: "secondary", disabled: last >= data.total, onclick: () => go({offset: data.offset + data.limit})}, "next ›"));
  fill(main, 
    h("h1", null, "Topics"),
    createTopicForm(),
    h("div", {class: "toolbar"}, search, kinds),
    pager,
    table([
      {title: "topic", render: t => link(`#/topic/${encodeURIComponent(t.name)}`, t.name)},
      {title: "kind", render: t => h("span", {class: "badge"}, t.kind)},
      {title: "type", render: t => t.type || ""},
      {title: "queues", num: true, render: t => t.error ? "-" : fmtNum(t.queues)},
      {title: "brokers", render: t => (t.brokers || []).join(", ")},
      {title: "messages", num: true, render: t => fmtNum(t.messages)},
      {title: "max offset (sum)", num: true, render: t => fmtNum(t.max_offset)},
      {title: "last stored", render: t => t.error ? h("span", {class: "muted"}, t.error) : fmtTime(t.last_update)},
    ], data.topics, {id: "topics", empty: q ? `no topic matches "${q}"` : "no topics",
      rowAttrs: t => ({"data-topic": t.name})}),
  );
  if (document.activeElement === document.body && q) { search.focus(); search.setSelectionRange(q.length, q.length); }
}

// Whether this user may use the write actions (topic create, re-drive); the server refuses
// them to other accounts anyway.
function mayWrite() { return !session.login || (session.user && session.user.admin); }

function readOnlyNote(what) {
  return h("p", {class: "muted read-only"}, `${what} needs an admin account; ${session.user.access_key} is not one.`);
}

function createTopicForm() {
  if (!mayWrite()) return readOnlyNote("Creating a topic");
  const name = h("input", {type: "text", id: "new-topic-name", placeholder: "new topic name", required: true});
  const queues = h("input", {type: "number", id: "new-topic-queues", min: 1, max: 1024, value: 4, class: "narrow"});
  // RocketMQ 5's topic message type: a send of another type is refused.
  const type = h("select", {id: "new-topic-type"},
    ["NORMAL", "FIFO", "DELAY", "TRANSACTION"].map(t => h("option", {value: t}, t.toLowerCase())));
  const out = h("div", {id: "create-topic-result"});
  const form = h("form", {class: "inline card", id: "create-topic"},
    h("strong", null, "Create topic"), name,
    h("label", null, "queues per broker ", queues),
    h("label", null, "type ", type),
    h("button", {type: "submit"}, "Create"), out);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    out.replaceChildren();
    try {
      const r = await api("/api/topics", {name: name.value.trim(), queues: Number(queues.value), message_type: type.value});
      out.replaceChildren(h("div", {class: "notice"}, `created ${r.topic} with ${r.queues} queue(s) on ${r.brokers.join(", ")}`));
      setTimeout(() => setHash("topics", "", new URLSearchParams({q: r.topic})), 600);
    } catch (err) { out.replaceChildren(errorBox(err)); }
  });
  return form;
}

async function viewTopic(seq, name) {
  const data = await api("/api/topic?name=" + encodeURIComponent(name));
  if (seq !== renderSeq) return;
  const latest = h("div", {id: "latest-messages"}, h("p", {class: "muted"}, "loading…"));
  fill(main, 
    h("h1", null, `Topic ${data.name}`),
    h("div", {class: "card"}, h("dl", {class: "kv"},
      h("dt", null, "brokers"), h("dd", null, Object.entries(data.brokers).map(([n, a]) => `${n} (${a})`).join(", ")),
      h("dt", null, "message type"), h("dd", {id: "topic-type"}, data.message_type || "-"),
      h("dt", null, "queues"), h("dd", null, data.queue_datas.map(q =>
        `${q.broker}: ${q.read_queues} read / ${q.write_queues} write, perm ${q.perm}`).join("; ")),
      h("dt", null, "consumed by"), h("dd", null, data.groups.length ?
        data.groups.flatMap((g, i) => [i ? ", " : "", link(`#/group/${encodeURIComponent(g)}`, g)]) : "no group"),
    )),
    h("h2", null, "Queue offsets"),
    table([
      {title: "broker", key: "broker"},
      {title: "queue", num: true, key: "queue_id"},
      {title: "min offset", num: true, render: r => fmtNum(r.min_offset)},
      {title: "max offset", num: true, render: r => fmtNum(r.max_offset)},
      {title: "messages", num: true, render: r => fmtNum(r.max_offset - r.min_offset)},
      {title: "last stored", render: r => fmtTime(r.last_update)},
    ], data.queues, {id: "queues"}),
    h("h2", null, "Latest messages"),
    latest,
  );
  const recent = await api("/api/topic/messages?" + new URLSearchParams({name, limit: "20"}));
  if (seq !== renderSeq) return;
  fill(latest, table([
    {title: "msg_id", mono: true, render: m => link(`#/message?${new URLSearchParams({id: m.msg_id, topic: m.topic})}`, m.msg_id)},
    {title: "queue", render: m => `${m.broker}:${m.queue_id}`},
    {title: "offset", num: true, key: "queue_offset"},
    {title: "tags", render: m => m.tags || "-"},
    {title: "keys", render: m => m.keys || "-"},
    {title: "stored", render: m => fmtTime(m.store_timestamp)},
    {title: "body", render: m => m.body.slice(0, 80)},
  ], recent.messages, {id: "latest", empty: "no messages", rowAttrs: m => ({"data-msg-id": m.msg_id})}));
  schedule(() => render());
}

// --- groups -----------------------------------------------------------------------------------
async function viewGroups(seq, params) {
  const q = params.get("q") || "";
  const offset = Number(params.get("offset") || 0);
  const data = await api("/api/groups?" + new URLSearchParams({q, offset: String(offset), limit: "100"}));
  if (seq !== renderSeq) return;
  const search = h("input", {type: "search", id: "group-filter", placeholder: "filter groups", value: q});
  search.addEventListener("change", () => setHash("groups", "", new URLSearchParams({q: search.value})));
  const last = Math.min(data.offset + data.groups.length, data.total);
  fill(main, 
    h("h1", null, "Consumer groups"),
    h("p", {class: "muted"}, `lag sampled every ${data.sampler.interval}s (${data.sampler.rounds} rounds so far)`,
      data.sampler.last_error ? ` · last sampling failed: ${data.sampler.last_error}` : ""),
    h("div", {class: "toolbar"}, search,
      h("span", null, data.total ? `${data.offset + 1}–${last} of ${data.total}` : "no groups"),
      h("button", {class: "secondary", disabled: data.offset === 0,
        onclick: () => setHash("groups", "", new URLSearchParams({q, offset: String(Math.max(0, data.offset - data.limit))}))}, "‹"),
      h("button", {class: "secondary", disabled: last >= data.total,
        onclick: () => setHash("groups", "", new URLSearchParams({q, offset: String(data.offset + data.limit)}))}, "›")),
    table([
      {title: "group", render: g => link(`#/group/${encodeURIComponent(g.name)}`, g.name)},
      {title: "lag", num: true, render: g => g.lag === null ? h("span", {class: "muted"}, "not sampled yet") : fmtNum(g.lag)},
      {title: "retry lag", num: true, render: g => fmtNum(g.retry_lag)},
      {title: "consumers", num: true, render: g => fmtNum(g.consumers)},
      {title: "model", render: g => g.message_model ? g.message_model.toLowerCase() : h("span", {class: "muted"}, "-")},
      {title: "consume TPS", num: true, render: g => g.consume_tps.toFixed(2)},
      {title: "sampled", render: g => fmtTime(g.sampled)},
      {title: "", render: g => link(`#/dlq?group=${encodeURIComponent(g.name)}`, "dead letters")},
    ], data.groups, {id: "groups", rowAttrs: g => ({"data-group": g.name})}),
  );
  schedule(() => render());
}

function lagChart(history) {
  const W = 800, H = 240, L = 60, R = 12, T = 12, B = 28;
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", id: "lag-chart", role: "img"});
  if (!history.length) {
    root.append(svg("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, "no samples yet"));
    return root;
  }
  const t0 = history[0].t, t1 = Math.max(history[history.length - 1].t, t0 + 1);
  const peak = Math.max(1, ...history.map(s => Math.max(s.lag, s.retry_lag)));
  const mag = Math.pow(10, Math.floor(Math.log10(peak / 4)));
  const step = Math.max(1, [1, 2, 5, 10].map(m => m * mag).find(s => s * 4 >= peak) || mag * 10);
  const top = step * 4;
  const x = t => L + (t - t0) / (t1 - t0) * (W - L - R);
  const y = v => T + (1 - v / top) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const v = step * i;
    root.append(svg("line", {class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v)}),
      svg("text", {x: L - 6, y: y(v) + 4, "text-anchor": "end"}, fmtNum(Math.round(v))));
  }
  root.append(svg("line", {class: "axis", x1: L, x2: L, y1: T, y2: H - B}),
    svg("line", {class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B}),
    svg("text", {x: L, y: H - 8}, fmtTime(t0).slice(11, 19)),
    svg("text", {x: W - R, y: H - 8, "text-anchor": "end"}, fmtTime(t1).slice(11, 19)));
  const pts = key => history.map(s => `${x(s.t).toFixed(1)},${y(s[key]).toFixed(1)}`).join(" ");
  const one = history.length === 1;
  if (one) {
    root.append(svg("circle", {cx: x(history[0].t), cy: y(history[0].lag), r: 4, fill: "#2463eb"}));
  } else {
    root.append(svg("polyline", {class: "lag", points: pts("lag")}),
      svg("polyline", {class: "retry", points: pts("retry_lag")}));
  }
  return root;
}

async function viewGroup(seq, name) {
  const data = await api("/api/group?name=" + encodeURIComponent(name));
  if (seq !== renderSeq) return;
  const c = data.connections;
  fill(main, 
    h("h1", null, `Group ${data.name}`),
    h("p", null, h("strong", {id: "group-lag"}, `total lag ${fmtNum(data.lag)}`), " · ",
      link(`#/dlq?group=${encodeURIComponent(data.name)}`, "dead letters")),
    h("div", {class: "card chart"}, h("h2", null, "Lag over time"), lagChart(data.history),
      h("div", {class: "muted"}, `${data.history.length} sample(s) · solid: lag on subscribed topics · dashed: waiting retries`)),
    h("h2", null, "Settings"),
    table([
      {title: "broker", key: "broker"},
      {title: "consume", render: s => s.consume_enable ? "enabled" : "disabled"},
      {title: "broadcast", render: s => s.consume_broadcast_enable ? "allowed" : "refused"},
      {title: "from min", render: s => String(s.consume_from_min_enable)},
      {title: "retry max", num: true, key: "retry_max_times"},
      {title: "retry queues", num: true, key: "retry_queue_nums"},
      {title: "slow broker id", num: true, key: "which_broker_when_consume_slowly"},
    ], data.settings, {id: "settings", empty: "no subscription group entry on any broker (one is made at the group's first heartbeat or by ferrymq group update)"}),
    h("h2", null, "Consumer connections"),
    h("p", {class: "muted"}, [c.message_model, c.consume_type, c.consume_from_where].filter(Boolean).join(" · ")),
    table([
      {title: "client id", mono: true, key: "client_id"},
      {title: "address", mono: true, key: "client_addr"},
      {title: "language", key: "language"},
      {title: "version", num: true, key: "version"},
    ], c.connections, {id: "connections", empty: "no consumer of this group is online"}),
    h("h2", null, "Subscriptions"),
    table([{title: "topic", render: s => s[0]}, {title: "expression", mono: true, render: s => s[1]}],
      Object.entries(c.subscriptions || {}), {empty: "none"}),
    h("h2", null, "Progress per queue"),
    table([
      {title: "topic", render: r => link(`#/topic/${encodeURIComponent(r.topic)}`, r.topic)},
      {title: "broker", key: "broker"},
      {title: "queue", num: true, key: "queue_id"},
      {title: "broker offset", num: true, render: r => fmtNum(r.broker_offset)},
      {title: "consumer offset", num: true, render: r => fmtNum(r.consumer_offset)},
      {title: "lag", num: true, render: r => fmtNum(r.lag)},
    ], data.progress, {id: "progress", empty: "no committed progress"}),
  );
  schedule(() => render());
}

// --- messages ---------------------------------------------------------------------------------
async function viewMessage(seq, params) {
  const id = params.get("id") || "", topic = params.get("topic") || "", key = params.get("key") || "";
  const idInput = h("input", {type: "text", id: "msg-id", placeholder: "msg_id or offset_msg_id", value: id, size: 40});
  const topicInput = h("input", {type: "text", id: "msg-topic", placeholder: "topic (needed for a key)", value: topic});
  const keyInput = h("input", {type: "text", id: "msg-key", placeholder: "key", value: key});
  const byId = h("form", {class: "inline card"}, h("strong", null, "By id"), idInput,
    h("button", {type: "submit"}, "Look up"));
  byId.addEventListener("submit", e => { e.preventDefault();
    setHash("message", "", new URLSearchParams({id: idInput.value.trim(), topic: topicInput.value.trim()})); });
  const byKey = h("form", {class: "inline card"}, h("strong", null, "By key"), topicInput, keyInput,
    h("button", {type: "submit"}, "Search"));
  byKey.addEventListener("submit", e => { e.preventDefault();
    setHash("message", "", new URLSearchParams({topic: topicInput.value.trim(), key: keyInput.value.trim()})); });
  const result = h("div", {id: "message-result"});
  fill(main, h("h1", null, "Messages"), byId, byKey, result);
  if (id) {
    result.append(h("p", {class: "muted"}, "looking up…"));
    const data = await api("/api/message?" + new URLSearchParams(topic ? {id, topic} : {id}));
    if (seq !== renderSeq) return;
    fill(result, messageDetail(data.message), traceTimeline(data.trace));
  } else if (key && topic) {
    const data = await api("/api/messages?" + new URLSearchParams({topic, key}));
    if (seq !== renderSeq) return;
    fill(result, h("h2", null, `${data.messages.length} message(s) with key ${data.key}`),
      table([
        {title: "msg_id", mono: true, render: m => link(`#/message?${new URLSearchParams({id: m.msg_id, topic: m.topic})}`, m.msg_id)},
        {title: "queue", render: m => `${m.broker}:${m.queue_id}`},
        {title: "offset", num: true, key: "queue_offset"},
        {title: "tags", render: m => m.tags || "-"},
        {title: "stored", render: m => fmtTime(m.store_timestamp)},
        {title: "body", render: m => m.body.slice(0, 80)},
      ], data.messages, {id: "key-results", empty: "no message has this key"}));
  }
}

function messageDetail(m) {
  const rows = [["msg_id", m.msg_id], ["offset_msg_id", m.offset_msg_id], ["topic", m.topic],
    ["queue", `${m.broker}:${m.queue_id} offset ${m.queue_offset}`], ["tags", m.tags || "-"], ["keys", m.keys || "-"],
    ["born", `${fmtTime(m.born_timestamp)} from ${m.born_host}`], ["stored", `${fmtTime(m.store_timestamp)} on ${m.store_host}`],
    ["reconsumed", m.reconsume_times], ["body size", `${fmtNum(m.body_size)} bytes`]];
  for (const [k, v] of Object.entries(m.properties || {})) rows.push([`property ${k}`, v]);
  return h("div", {class: "card", id: "message-detail"},
    h("h2", null, `Message ${m.msg_id}`),
    h("dl", {class: "kv"}, rows.flatMap(([k, v]) => [h("dt", null, k), h("dd", {class: "mono"}, v)])),
    h("h2", null, "Body"), h("pre", {class: "body"}, m.body + (m.body_truncated ? "\n…" : "")));
}

function traceTimeline(trace) {
  const events = [...trace.events].sort((a, b) => (a.t ?? Infinity) - (b.t ?? Infinity));
  const off = Object.entries(trace.trace_enable || {}).filter(([, on]) => !on).map(([b]) => b);
  const where = e => e.queue_offset !== undefined && e.queue_offset >= 0 ?
    `${e.broker}:${e.queue_id} offset ${e.queue_offset}` : (e.broker || "");
  const details = e => Object.entries(e.detail || {}).map(([k, v]) => `${k}=${v}`).join(" ");
  return h("div", {class: "card", id: "trace"},
    h("h2", null, "Trace"),
    trace.recorded ? null : h("p", {class: "muted", id: "trace-note"}, "no recorded trace: the stored copies are shown" +
      (trace.trace_error ? ` (the brokers answered: ${trace.trace_error})` : "")),
    off.length ? h("p", {class: "muted"}, `trace_enable is off on ${off.join(", ")}: deliveries there are not recorded`) : null,
    h("ul", {class: "timeline"}, events.map(e => h("li", {class: e.kind, "data-kind": e.kind},
      h("strong", null, e.kind.replace(/_/g, " ")), " ",
      e.source === "client" ? h("span", {class: "badge"}, "client trace") : null, " ",
      h("span", {class: "muted"}, e.t ? fmtTime(e.t) : ""),
      h("div", null, e.text),
      h("div", {class: "muted mono"}, [where(e), details(e)].filter(Boolean).join(" · "))))),
    h("h2", null, "Consumer groups"),
    table([
      {title: "group", render: t => link(`#/group/${encodeURIComponent(t.group)}`, t.group)},
      {title: "topic", key: "topic"},
      {title: "offset", num: true, key: "queue_offset"},
      {title: "track", render: t => h("span", {class: "badge " + (t.consumed ? "ok" : "warn")}, t.track)},
      {title: "group offset", num: true, key: "consumer_offset"},
    ], trace.tracks, {id: "tracks", empty: "no consumer group consumes its topic"}));
}

// --- dead letters -----------------------------------------------------------------------------
async function viewDlq(seq, params) {
  const group = params.get("group") || "";
  const input = h("input", {type: "text", id: "dlq-group", placeholder: "consumer group", value: group});
  const pick = h("form", {class: "inline card"}, h("strong", null, "Group"), input, h("button", {type: "submit"}, "Show"));
  pick.addEventListener("submit", e => { e.preventDefault(); setHash("dlq", "", new URLSearchParams({group: input.value.trim()})); });
  const result = h("div", {id: "dlq-result"});
  fill(main, h("h1", null, "Dead letters"), pick, result);
  if (!group) return;
  const data = await api("/api/dlq?" + new URLSearchParams({group}));
  if (seq !== renderSeq) return;
  const out = h("div", {id: "dlq-action"});
  const checks = new Map();
  const resend = async (body) => {
    out.replaceChildren(h("p", {class: "muted"}, "re-driving…"));
    try {
      const r = await api("/api/dlq/resend", body);
      out.replaceChildren(h("div", {class: "notice"}, `re-drove ${r.resent.length} message(s) to ${r.retry_topic}` +
        (r.held_back ? ` (${r.held_back} stay listed: the broker keeps no acknowledged ranges)` : "")));
      setTimeout(() => render(), 800);
    } catch (err) { out.replaceChildren(errorBox(err)); }
  };
  fill(result, 
    h("p", null, `${data.messages.length}${data.truncated ? "+" : ""} message(s) waiting in ${data.topic}`),
    mayWrite() ? null : readOnlyNote("Re-driving"),
    h("div", {class: "toolbar"},
      h("button", {id: "resend-selected", disabled: !data.messages.length || !mayWrite(), onclick: () => {
        const ids = [...checks].filter(([, c]) => c.checked).map(([id]) => id);
        if (ids.length) resend({group, msg_ids: ids});
      }}, "Re-drive selected"),
      h("button", {id: "resend-all", class: "secondary", disabled: !data.messages.length || !mayWrite(),
        onclick: () => resend({group, all: true})}, "Re-drive all")),
    out,
    table([
      {title: "", render: m => { const c = h("input", {type: "checkbox"}); checks.set(m.msg_id, c); return c; }},
      {title: "msg_id", mono: true, render: m => link(`#/message?${new URLSearchParams({id: m.msg_id})}`, m.msg_id)},
      {title: "original topic", render: m => m.original_topic || "-"},
      {title: "reconsumed", num: true, key: "reconsume_times"},
      {title: "stored", render: m => fmtTime(m.store_timestamp)},
      {title: "body", render: m => m.body_preview},
    ], data.messages, {id: "dlq", empty: "nothing to re-drive", rowAttrs: m => ({"data-msg-id": m.msg_id})}),
  );
}

// --- routing ----------------------------------------------------------------------------------
const VIEWS = {
  cluster: (seq) => viewCluster(seq),
  topics: (seq, arg, params) => viewTopics(seq, params),
  topic: (seq, arg) => viewTopic(seq, arg),
  groups: (seq, arg, params) => viewGroups(seq, params),
  group: (seq, arg) => viewGroup(seq, arg),
  message: (seq, arg, params) => viewMessage(seq, params),
  dlq: (seq, arg, params) => viewDlq(seq, params),
};
const NAV = {topic: "topics", group: "groups"};

async function render() {
  clearTimeout(refreshTimer);
  const seq = ++renderSeq;
  const {view, arg, params} = parseHash();
  const fn = VIEWS[view] || VIEWS.cluster;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === (NAV[view] || view));
  setStatus("loading…");
  try {
    await fn(seq, arg, params);
    if (seq === renderSeq) setStatus(`updated ${fmtTime(Date.now()).slice(11)}`);
  } catch (err) {
    if (seq !== renderSeq) return;
    // A failed refresh keeps what was shown, with one error above it, not one per attempt.
    for (const el of main.querySelectorAll(":scope > .loading, :scope > .error")) el.remove();
    main.prepend(errorBox(err));
    setStatus("failed");
    schedule(() => render());
  }
}

function showSession() {
  const user = document.getElementById("user");
  const banner = document.getElementById("open-banner");
  if (!session.login) {
    banner.textContent = "Open dashboard: it has no login, so anyone who can reach its port can " +
      "create topics and re-drive dead letters. Start it with --acl-file to require one.";
    banner.hidden = false;
    return;
  }
  const logout = h("button", {id: "logout", class: "secondary", type: "button", onclick: async () => {
    try { await api("/api/logout", {}); } finally { location.assign("/login"); }
  }}, "Log out");
  fill(user, h("span", {id: "user-name"}, `${session.user.access_key}${session.user.admin ? " (admin)" : " (read only)"}`),
    logout);
}

async function start() {
  try {
    session = await api("/api/session");
  } catch (err) {
    main.prepend(errorBox(err));
    return;
  }
  showSession();
  window.addEventListener("hashchange", render);
  api("/api/overview").then(o => { document.getElementById("namesrv").textContent = `name server ${o.namesrv}`; }).catch(() => {});
  render();
}

start();
