// The crawl console: a client of the REST API, polling every 2 s. No framework, no build step.
// Everything shown from the API goes through textContent, never innerHTML: URLs and host names
// come from the crawled web.
"use strict";

const POLL_MS = 2000;
const HOSTS_PAGE = 25;
const HISTORY = 300; // chart samples kept (10 minutes at 2 s)
let timer = null;
let token = sessionStorage.getItem("crawler-token") || "";

// -- the API ---------------------------------------------------------------------------------

async function api(method, path, body) {
  const headers = {"Accept": "application/json"};
  // Every state-changing call is JSON: the server refuses others (cross-site protection).
  if (method !== "GET") headers["Content-Type"] = "application/json";
  if (token) headers["Authorization"] = "Bearer " + token;
  const res = await fetch(path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body),
                                 credentials: "same-origin"});
  if (res.status === 401 && (res.headers.get("WWW-Authenticate") || "").startsWith("Bearer")) {
    document.getElementById("token-form").hidden = false;
  }
  const data = await res.json().catch(() => ({error: res.status + " " + res.statusText}));
  if (!res.ok) throw new Error(data.error || res.statusText);
  return data;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells, numeric) {
  const tr = document.createElement("tr");
  cells.forEach((c, i) => {
    const td = c instanceof Node ? el("td") : el("td", c, numeric && numeric.includes(i) ? "n" : "");
    if (c instanceof Node) td.appendChild(c);
    tr.appendChild(td);
  });
  return tr;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function utc(ts) {
  return ts ? new Date(ts * 1000).toISOString().replace("T", " ").slice(0, 19) : "";
}

function banner(message) {
  const b = document.getElementById("banner");
  b.textContent = message || "";
  b.hidden = !message;
}

// A host's render decision (render=auto) and what it rests on: the pages whose render completed
// and were compared with their HTML, the links and text the browser added over them, and the
// renders that timed out or failed (counted, never learnt from).
function renderCell(decision, e) {
  const cell = el("span");
  const seen = e && Object.values(e).some(v => v);
  if (!decision && !seen) return cell;
  cell.appendChild(el("b", decision || "sampling", "render-decision"));
  if (seen) {
    const n = v => (v > 0 ? "+" : "") + Number(v).toLocaleString("en");
    cell.appendChild(el("div", `${e.compared} compared, ${n(e.links_gained)} links, ${n(e.text_gained)} chars; ` +
                               `${e.timeouts} timed out, ${e.failures} failed`, "render-evidence muted"));
  }
  return cell;
}

function fillNodes(tbody, nodes) {
  fill(tbody, nodes.map(n => row([n.node, (n.shards || []).join(",") || "-", n.age + " s ago", n.fetched,
                                  Number(n.pages_per_s).toFixed(1), n.state], [2, 3, 4])));
}

// -- jobs page -------------------------------------------------------------------------------

async function jobsPage(view) {
  view.replaceChildren(document.getElementById("jobs-page").content.cloneNode(true));
  const form = view.querySelector("#submit-form");
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const f = new FormData(form);
    const settings = {store: f.get("store")};
    for (const name of ["delay", "max_pages", "max_depth", "shards"]) {
      if (String(f.get(name)).trim()) settings[name] = String(f.get(name)).trim();
    }
    const seeds = String(f.get("seeds")).split(/\s+/).filter(Boolean);
    const msg = form.querySelector(".msg");
    try {
      const out = await api("POST", "/api/jobs", {seeds, settings});
      location.hash = "#/jobs/" + encodeURIComponent(out.id);
    } catch (e) { msg.textContent = e.message; msg.className = "msg error"; }
  });
  const refresh = async () => {
    const [{jobs}, {nodes}] = await Promise.all([api("GET", "/api/jobs"), api("GET", "/api/nodes")]);
    fill(view.querySelector("#jobs tbody"), jobs.map(j => {
      const a = el("a", j.id);
      a.href = "#/jobs/" + encodeURIComponent(j.id);
      return row([a, j.status, utc(j.created_at), j.stored, j.open, j.errors, (j.seeds || []).join(" ")], [3, 4, 5]);
    }));
    fillNodes(view.querySelector(".nodes tbody"), nodes);
  };
  return refresh;
}

// -- job page --------------------------------------------------------------------------------

function drawChart(canvas, samples) {
  // Pages/s between consecutive samples of the stored counter, drawn as a line with a y scale.
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, left = 44, bottom = 20, top = 8;
  ctx.clearRect(0, 0, w, h);
  const rates = [];
  for (let i = 1; i < samples.length; i++) {
    const dt = samples[i].t - samples[i - 1].t;
    if (dt > 0) rates.push({t: samples[i].t, v: Math.max(0, (samples[i].stored - samples[i - 1].stored) / dt)});
  }
  const max = Math.max(1, ...rates.map(r => r.v));
  const scale = Math.pow(10, Math.floor(Math.log10(max)));
  const ymax = Math.ceil(max / scale) * scale;
  ctx.font = "11px system-ui, sans-serif";
  ctx.strokeStyle = "#d9dee4";
  ctx.fillStyle = "#6a7380";
  for (let k = 0; k <= 4; k++) {
    const y = top + (h - top - bottom) * (1 - k / 4);
    ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(w, y); ctx.stroke();
    ctx.fillText(String(+(ymax * k / 4).toFixed(2)), 2, y + 4);
  }
  const t1 = samples.length ? samples[samples.length - 1].t : 0;
  const span = Math.max(60, t1 - (samples.length ? samples[0].t : 0));
  ctx.fillText("-" + Math.round(span) + " s", left, h - 4);
  ctx.fillText("now", w - 24, h - 4);
  if (rates.length < 1) return;
  ctx.strokeStyle = "#2364aa";
  ctx.lineWidth = 2;
  ctx.beginPath();
  rates.forEach((r, i) => {
    const x = left + (w - left) * (1 - (t1 - r.t) / span);
    const y = top + (h - top - bottom) * (1 - r.v / ymax);
    if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
  });
  ctx.stroke();
  ctx.lineWidth = 1;
}

async function jobPage(view, jobId) {
  view.replaceChildren(document.getElementById("job-page").content.cloneNode(true));
  const q = s => view.querySelector(s);
  const base = "/api/jobs/" + encodeURIComponent(jobId);
  const samples = [];
  const hosts = {offset: 0, sort: "queued", desc: true, prefix: ""};
  let logAfter = "", tick = 0, settingsShown = false, hostsTotal = 0;
  q("#job-id").textContent = jobId;

  view.querySelectorAll(".actions button").forEach(b => b.addEventListener("click", async () => {
    const msg = q("#action-msg");
    try {
      const out = await api("POST", `${base}/${b.dataset.action}`);
      msg.textContent = `${b.dataset.action}: ${out.status}`;
      msg.className = "msg";
      await refresh();
    } catch (e) { msg.textContent = e.message; msg.className = "msg error"; }
  }));

  // Settings: the runtime ones as a form; only fields the operator changed are sent.
  async function loadSettings() {
    const {settings, runtime} = await api("GET", `${base}/settings`);
    const form = q("#settings-form");
    form.replaceChildren(...runtime.map(name => {
      const label = el("label", name.replace(/_/g, " "));
      const input = el("input");
      input.name = name;
      input.value = settings[name] === undefined || settings[name] === null ? "" : String(settings[name]);
      input.dataset.was = input.value;
      label.appendChild(input);
      return label;
    }));
    settingsShown = true;
  }
  q("#settings-form").addEventListener("submit", async ev => {
    ev.preventDefault();
    const changes = {};
    q("#settings-form").querySelectorAll("input").forEach(i => { if (i.value !== i.dataset.was) changes[i.name] = i.value; });
    const msg = q("#settings-msg");
    if (!Object.keys(changes).length) { msg.textContent = "nothing changed"; return; }
    try {
      const out = await api("PATCH", `${base}/settings`, changes);
      msg.textContent = "saved: " + Object.entries(out.changed).map(([k, [a, b]]) => `${k} ${a} → ${b}`).join("; ");
      msg.className = "msg";
      await loadSettings();
    } catch (e) { msg.textContent = e.message; msg.className = "msg error"; }
  });

  // Hosts: sorted and paged by the server, so a job with 100,000 hosts sends 25 rows.
  const sorts = ["queued", "inflight", "delay", "fetched", "errors", "admitted", "host"];
  q("#hosts-sort").replaceChildren(...sorts.map(s => { const o = el("option", s); o.value = s; return o; }));
  q("#hosts-sort").addEventListener("change", e => { hosts.sort = e.target.value; hosts.offset = 0; refreshHosts(); });
  q("#hosts-desc").addEventListener("change", e => { hosts.desc = e.target.checked; hosts.offset = 0; refreshHosts(); });
  q("#hosts-prefix").addEventListener("input", e => { hosts.prefix = e.target.value.trim(); hosts.offset = 0; refreshHosts(); });
  q("#hosts-prev").addEventListener("click", () => { hosts.offset = Math.max(0, hosts.offset - HOSTS_PAGE); refreshHosts(); });
  q("#hosts-next").addEventListener("click", () => { hosts.offset += HOSTS_PAGE; refreshHosts(); });
  async function refreshHosts() {
    const params = new URLSearchParams({sort: hosts.sort, desc: hosts.desc, offset: hosts.offset,
                                        limit: HOSTS_PAGE, prefix: hosts.prefix});
    const page = await api("GET", `${base}/hosts?${params}`);
    hostsTotal = page.total;
    q("#hosts-total").textContent = `(${page.total})`;
    q("#hosts-range").textContent = page.total ? `${page.offset + 1}–${page.offset + page.hosts.length} of ${page.total}` : "none";
    q("#hosts-prev").disabled = hosts.offset === 0;
    q("#hosts-next").disabled = page.offset + page.hosts.length >= page.total;
    fill(q("#hosts tbody"), page.hosts.map(h => {
      const o = h.override ? Object.entries(h.override).map(([k, v]) => `${k} ${v}`).join(", ") : "";
      const tr = row([h.host, h.queued, h.queued_in_store, h.inflight, Number(h.delay).toFixed(2), h.fetched, h.errors,
                      renderCell(h.render, h.render_evidence), o],
                     [1, 2, 3, 4, 5, 6]);
      tr.firstChild.className = "host";
      tr.addEventListener("click", () => { q("#override-form").elements.host.value = h.host; });
      return tr;
    }));
  }
  const ov = q("#override-form");
  ov.addEventListener("submit", async ev => {
    ev.preventDefault();
    const body = {};
    if (ov.elements.delay.value.trim()) body.delay = ov.elements.delay.value.trim();
    if (ov.elements.per_host.value.trim()) body.per_host = ov.elements.per_host.value.trim();
    await overrideCall("PUT", body);
  });
  q("#override-clear").addEventListener("click", () => overrideCall("DELETE"));
  async function overrideCall(method, body) {
    const msg = ov.querySelector(".msg");
    try {
      await api(method, `${base}/hosts/${encodeURIComponent(ov.elements.host.value.trim())}`, body);
      msg.textContent = method === "PUT" ? "override set" : "override cleared";
      msg.className = "msg";
      await refreshHosts();
    } catch (e) { msg.textContent = e.message; msg.className = "msg error"; }
  }

  q("#log-level").addEventListener("change", () => { logAfter = ""; q("#log").textContent = ""; refreshLog(); });
  async function refreshLog() {
    const level = q("#log-level").value;
    const params = new URLSearchParams({level, limit: 200});
    if (logAfter) params.set("after", logAfter);
    const {entries} = await api("GET", `${base}/logs?${params}`);
    if (!entries.length) return;
    logAfter = entries[entries.length - 1].id;
    const pre = q("#log");
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    // As ``crawler logs`` prints them (crawler.state.joblog.format_entry).
    const lines = entries.map(e => `${utc(e.ts)} ${e.level.padEnd(7)} ${e.event.padEnd(16)} ${e.node}` +
                                   (e.by ? ` by ${e.by}` : "") + `: ${e.message}`);
    pre.textContent = (pre.textContent ? pre.textContent + "\n" : "") + lines.join("\n");
    const all = pre.textContent.split("\n");
    if (all.length > 500) pre.textContent = all.slice(-500).join("\n");
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  }

  async function refresh() {
    const st = await api("GET", base);
    const c = st.counters || {};
    samples.push({t: Date.now() / 1000, stored: c.stored || 0});
    if (samples.length > HISTORY) samples.shift();
    const badge = q("#status");
    badge.textContent = st.status;
    badge.className = "badge " + st.status;
    q("#btn-pause").disabled = !["running", "waiting"].includes(st.status);
    q("#btn-resume").disabled = st.status !== "paused";
    q("#btn-stop").disabled = ["stopped", "done"].includes(st.status);
    const err = st.error || (st.store_error ? "store: " + st.store_error.error : "");
    q("#job-error").textContent = err;
    q("#job-error").hidden = !err;
    // Where the waiting URLs are: host queues in Redis (capped per host) and the store's frontier table.
    const where = {queued_in_redis: st.queued_in_redis || 0, queued_in_store: st.queued_in_store || 0};
    fill(q("#counters tbody"), Object.entries({...where, ...c}).filter(([k]) => !k.startsWith("error:")).map(([k, v]) => {
      const tr = row([k.replace(/_/g, " "), v], [1]);
      tr.lastChild.id = "counter-" + k;
      return tr;
    }));
    const errors = Object.entries(c).filter(([k]) => k.startsWith("error:")).sort((a, b) => b[1] - a[1]);
    fill(q("#errors tbody"), errors.length ? errors.map(([k, v]) => row([k.slice(6), v], [1])) : [row(["none", ""])]);
    drawChart(q("#rate-chart"), samples);
    const n = samples.length;
    if (n > 1) {
      const rate = (samples[n - 1].stored - samples[n - 2].stored) / (samples[n - 1].t - samples[n - 2].t);
      q("#rate-now").textContent = `${rate.toFixed(1)} pages/s now, ${c.stored || 0} stored`;
    }
    // A table of many hosts takes the server a while to build (about 2 s for 100,000): poll it
    // less often then; sorting and paging by hand still ask at once.
    const jobs = [refreshLog(), api("GET", "/api/nodes").then(({nodes}) => fillNodes(q(".nodes tbody"), nodes))];
    if (tick % 5 === 0) {
      jobs.push(api("GET", `${base}/cycles`).then(({cycles}) => fill(q("#cycles tbody"), cycles.length ? cycles.map(cy => row(
        [cy.cycle, utc(cy.started_at), cy.finished_at ? `+${(cy.finished_at - cy.started_at).toFixed(1)} s` : "running",
         cy.fetched, cy.new, cy.changed, cy.gone], [3, 4, 5, 6])) : [row(["a one-off job: no cycles"])])));
      jobs.push(api("GET", `${base}/shards`).then(({shards}) => fill(q("#shards tbody"), shards.map(s => row(
        [s.shard, s.state, (s.nodes || []).join(", ")])))));
    }
    if (hostsTotal < 10000 || tick % 5 === 0) jobs.push(refreshHosts());
    if (!settingsShown) jobs.push(loadSettings());
    tick++;
    await Promise.all(jobs);
  }
  return refresh;
}

// -- routing and polling ---------------------------------------------------------------------

async function route() {
  clearTimeout(timer);
  const view = document.getElementById("view");
  const m = location.hash.match(/^#\/jobs\/(.+)$/);
  const refresh = m ? await jobPage(view, decodeURIComponent(m[1])) : await jobsPage(view);
  const current = location.hash;
  const loop = async () => {
    try {
      await refresh();
      banner("");
      document.getElementById("live").textContent = "updated " + new Date().toLocaleTimeString();
    } catch (e) { banner(e.message); }
    if (location.hash === current) timer = setTimeout(loop, POLL_MS);
  };
  loop();
}

document.getElementById("token-form").addEventListener("submit", ev => {
  ev.preventDefault();
  token = document.getElementById("token").value;
  sessionStorage.setItem("crawler-token", token);
  document.getElementById("token-form").hidden = true;
  route();
});
window.addEventListener("hashchange", route);
route();
