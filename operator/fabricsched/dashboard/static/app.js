// The fabric page. Every string from the document goes into the DOM as text (textContent,
// title, attribute values): names that look like markup stay text. No innerHTML anywhere.
"use strict";
(function () {
  const POLL_MS = 1000;
  const COMPACT_HOSTS = 512; // above this many hosts, leaves are tiles and a click zooms into one
  const params = new URLSearchParams(window.location.search);
  const embedded = document.getElementById("fabricsched-data");
  const ui = { doc: null, gang: null, element: null, zoom: params.get("leaf") || null, etag: null,
               diagnosis: null }; // diagnosis: {key, status, body} of the selected gang, once asked

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = String(v);
      else if (k === "title") node.title = String(v);
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, String(v));
    }
    for (const child of children) if (child !== null && child !== undefined) node.append(child);
    return node;
  }
  const $ = (id) => document.getElementById(id);
  const fmt = (x, digits) => (typeof x === "number" ? x.toFixed(digits) : "-");
  function since(epoch) {
    if (typeof epoch !== "number") return "";
    const s = Math.max(0, Math.round(Date.now() / 1000 - epoch));
    const ago = s < 120 ? s + " s" : s < 7200 ? Math.round(s / 60) + " min" : Math.round(s / 3600) + " h";
    return new Date(epoch * 1000).toISOString().replace(".000", "") + " (" + ago + " ago)";
  }
  function healthText(name, h) {
    const lines = [name, h.state + (h.state === "healthy" ? "" : " (capacity " + fmt(h.capacity, 2) + ")")];
    for (const r of h.records || []) {
      const rail = r.rail === null ? "" : "rail " + r.rail + ": ";
      lines.push(rail + r.state + " " + fmt(r.capacity, 2) + (r.reason ? " - " + r.reason : "") +
                 (r.since ? ", since " + since(r.since) : ""));
    }
    return lines.join("\n");
  }

  const HEALTHY = { state: "healthy", capacity: 1, records: [] };
  function normalise(doc) { // the document leaves out what the page can derive: ids, healthy health
    if (!doc.fabric) return doc;
    const leafTier = doc.fabric.tiers[0].name;
    for (const d of doc.fabric.domains) d.health = d.health || HEALTHY;
    for (const h of doc.fabric.hosts) {
      h.health = h.health || HEALTHY;
      h.id = "node:" + h.name;
      h.leaf = "domain:" + leafTier + "/" + h.leaf;
    }
    return doc;
  }
  function gpuBar(x) {
    const total = Math.max(1, x.gpus);
    const part = (cls, n) => {
      if (n <= 0) return null;
      const span = el("span", { class: cls });
      span.style.width = (100 * n / total) + "%"; // CSSOM, not a style attribute: the page's CSP allows it
      return span;
    };
    return el("div", { class: "gpus" }, part("u", x.used), part("r", x.reserved), part("f", x.free));
  }
  function rails(x, count) {
    if (count <= 1) return null;
    const strip = el("div", { class: "rails" });
    for (let rail = 0; rail < count; rail++) {
      const rec = (x.health.records || []).find((r) => r.rail === rail);
      const whole = (x.health.records || []).find((r) => r.rail === null);
      const state = rec ? rec.state : whole ? whole.state : "healthy";
      strip.append(el("span", { class: "health-" + state, title: "rail " + rail + ": " + state }));
    }
    return strip;
  }
  function hostTile(h, fabric) {
    return el("div", {
      class: "host health-" + h.health.state, "data-id": h.id, "data-leaf": h.leaf,
      title: healthText(h.name, h.health) + "\nGPUs " + h.used + " used, " + h.reserved + " reserved, " +
             h.free + " free of " + h.gpus,
      onclick: (e) => { e.stopPropagation(); selectElement(h.id); },
    }, el("div", { class: "name", text: h.name }), gpuBar(h),
       el("div", { class: "counts", text: h.used + "/" + h.reserved + "/" + h.free }), rails(h, fabric.rails));
  }
  function leafTile(d, fabric, index) {
    const bad = (index.hostsOf.get(d.id) || []).filter((h) => h.health.state !== "healthy");
    const worst = bad.some((h) => h.health.state === "down") ? "down" : "degraded";
    return el("div", {
      class: "tile health-" + d.health.state, "data-id": d.id,
      title: healthText(d.tier + " " + d.name, d.health) + "\n" + d.hosts + " hosts; GPUs " + d.used +
             " used, " + d.reserved + " reserved, " + d.free + " free" +
             (bad.length ? "\n" + bad.length + " host(s) not healthy: " + bad.map((h) => h.name).join(", ") : "") +
             "\n(click to zoom)",
      onclick: (e) => { e.stopPropagation(); ui.zoom = d.id; render(); },
    }, el("div", { class: "name", text: d.name }), gpuBar(d), rails(d, fabric.rails),
       bad.length ? el("div", { class: "hostmarks health-" + worst, text: bad.length + " host" + (bad.length > 1 ? "s " : " ") + worst }) : null);
  }
  function domainBox(d, index, fabric, compact) {
    const label = el("div", { class: "label", title: healthText(d.tier + " " + d.name, d.health),
                              onclick: (e) => { e.stopPropagation(); selectElement(d.id); } },
      el("span", { text: d.tier + " " + d.name }),
      d.health.state === "healthy" ? null
        : el("span", { class: "capacity", text: d.health.state + " " + fmt(d.health.capacity, 2) }),
      el("span", { class: "counts", text: d.free + "/" + d.gpus + " free" }));
    const box = el("div", { class: "domain health-" + d.health.state, "data-id": d.id }, label,
                   rails(d, fabric.rails));
    if (d.level === 0) {
      const hosts = el("div", { class: "hosts" });
      for (const h of index.hostsOf.get(d.id) || []) hosts.append(hostTile(h, fabric));
      box.append(hosts);
    } else {
      const kids = el("div", { class: "children" });
      for (const c of index.childrenOf.get(d.id) || []) {
        kids.append(c.level === 0 && compact ? leafTile(c, fabric, index) : domainBox(c, index, fabric, compact));
      }
      box.append(kids);
    }
    return box;
  }
  function indexOf(fabric) {
    const hostsOf = new Map(), childrenOf = new Map(), byId = new Map();
    for (const d of fabric.domains) {
      byId.set(d.id, d);
      if (d.parent) { if (!childrenOf.has(d.parent)) childrenOf.set(d.parent, []); childrenOf.get(d.parent).push(d); }
    }
    for (const h of fabric.hosts) {
      byId.set(h.id, h);
      if (!hostsOf.has(h.leaf)) hostsOf.set(h.leaf, []);
      hostsOf.get(h.leaf).push(h);
    }
    return { hostsOf, childrenOf, byId };
  }

  function renderFabric(doc) {
    const root = $("fabric");
    root.replaceChildren();
    $("unzoom").hidden = true;
    if (!doc.fabric) { root.append(el("p", { class: "empty", text: "nothing to show" })); return null; }
    const fabric = doc.fabric, index = indexOf(fabric);
    const compact = fabric.hosts.length > COMPACT_HOSTS;
    const top = fabric.tiers.length - 1;
    if (ui.zoom && index.byId.has(ui.zoom) && index.byId.get(ui.zoom).level === 0) {
      $("unzoom").hidden = false;
      root.append(domainBox(index.byId.get(ui.zoom), index, fabric, false));
    } else {
      ui.zoom = null;
      for (const d of fabric.domains.filter((x) => x.level === top)) {
        root.append(top === 0 && compact ? leafTile(d, fabric, index) : domainBox(d, index, fabric, compact));
      }
    }
    return index;
  }

  function visibleGangs(doc) {
    const text = $("filter-text").value.trim().toLowerCase();
    const phase = $("filter-phase").value, degraded = $("filter-degraded").checked;
    return doc.gangs.filter((g) => (!text || (g.namespace + "/" + g.name).toLowerCase().includes(text)) &&
      (!phase || g.phase === phase) && (!degraded || g.degradedPath));
  }
  function touches(g, id) {
    return g.hosts.some((h) => "node:" + h === id) || g.path.includes(id);
  }
  function renderGangs(doc) {
    const body = $("gangs").tBodies[0];
    body.replaceChildren();
    const shown = visibleGangs(doc);
    for (const g of shown) {
      const row = el("tr", {
        "data-key": g.key, class: (g.degradedPath ? "degraded" : "") +
          (ui.gang === g.key ? " selected" : "") + (ui.element && touches(g, ui.element) ? " touched" : ""),
        onclick: () => selectGang(g.key),
      }, el("td", { text: g.namespace + "/" + g.name, title: g.key }), el("td", { text: g.phase }),
         el("td", { class: "num", text: g.size + " x " + g.gpusPerPod }),
         el("td", { text: g.tier ? g.tier + (g.required ? " (required)" : "") : "-" }),
         el("td", { class: "num", text: fmt(g.slowdown, 3) }),
         el("td", { class: "num", text: fmt(g.slowdownAtPlacement, 3) }),
         el("td", { text: g.degradedPath ? "yes" : "no" }));
      body.append(row);
    }
    if (!shown.length) body.append(el("tr", {}, el("td", { colspan: 7, class: "empty", text: "no gang" })));
  }
  function renderElements(doc) {
    const list = $("elements");
    list.replaceChildren();
    const bad = doc.fabric ? [...doc.fabric.domains, ...doc.fabric.hosts].filter((x) => x.health.state !== "healthy") : [];
    for (const x of bad) {
      const name = x.tier ? x.tier + " " + x.name : "host " + x.name;
      const n = doc.gangs.filter((g) => touches(g, x.id)).length;
      list.append(el("li", {
        class: "health-" + x.health.state + (ui.element === x.id ? " selected" : ""), "data-id": x.id,
        title: healthText(name, x.health), onclick: () => selectElement(x.id),
      }, el("span", { text: name + ": " + x.health.state + " " + fmt(x.health.capacity, 2) + ", " + n +
                               (n === 1 ? " gang" : " gangs") })));
    }
    if (!bad.length) list.append(el("li", { class: "empty", text: "none" }));
  }
  function renderPending(doc) {
    const body = $("pending").tBodies[0];
    body.replaceChildren();
    for (const p of doc.pending) {
      body.append(el("tr", { "data-key": p.key }, el("td", { text: p.namespace + "/" + p.name }),
        el("td", { text: p.reason }), el("td", { text: p.message, title: p.since ? "since " + since(p.since) : null })));
    }
    if (!doc.pending.length) body.append(el("tr", {}, el("td", { colspan: 3, class: "empty", text: "none" })));
  }
  function highlight(doc, index) {
    const gang = doc.gangs.find((g) => g.key === ui.gang) || null;
    if (ui.gang && !gang) ui.gang = null;
    const hosts = new Set(gang ? gang.hosts.map((h) => "node:" + h) : []);
    const uplinks = new Set(gang ? gang.uplinks : []);
    const leaves = new Set(gang && index ? gang.hosts.map((h) => index.byId.get("node:" + h)).filter(Boolean).map((h) => h.leaf) : []);
    for (const node of document.querySelectorAll("#fabric [data-id]")) {
      const id = node.getAttribute("data-id");
      const isTile = node.classList.contains("tile");
      node.classList.toggle("selected", hosts.has(id) || (isTile && leaves.has(id)) || ui.element === id);
      node.classList.toggle("uplink-selected", uplinks.has(id));
    }
    const what = $("selection");
    if (gang) {
      what.textContent = "gang " + gang.namespace + "/" + gang.name + ": " + gang.hosts.length + " hosts, " +
        gang.uplinks.length + " uplinks crossed, slowdown " + fmt(gang.slowdown, 3);
    } else if (ui.element && index && index.byId.has(ui.element)) {
      const x = index.byId.get(ui.element);
      const n = doc.gangs.filter((g) => touches(g, ui.element)).length;
      what.textContent = (x.tier ? x.tier + " " : "host ") + x.name + " (" + x.health.state + "): touches " +
        n + (n === 1 ? " gang" : " gangs");
    } else {
      ui.element = null;
      what.textContent = "";
    }
  }
  // The selected gang's constraints and preemption: what it asked for, what held, whom it
  // evicted and who evicted it (all text; the document bounds every list).
  function renderGangDetail(doc) {
    const panel = $("gang-detail");
    const g = doc.gangs.find((x) => x.key === ui.gang) || null;
    if (!g) { panel.hidden = true; panel.replaceChildren(); return; }
    const items = [];
    const c = g.constraints || {};
    if (c.required) items.push("required tier: " + c.required);
    if (c.preferred) {
      items.push("preferred tier: " + c.preferred + (c.preferredHeld === true ? " (held)" :
        c.preferredHeld === false ? " (not held)" : ""));
    }
    if (!c.required && !c.preferred) items.push("tier: the lowest that holds it");
    const s = c.slices;
    if (s) {
      const where = s.domains.length ? s.domains.map((d, i) => "slice " + i + " in " + d).join(", ") +
        (s.domainsMore ? ", " + s.domainsMore + " more" : "") : "no plan keeps them whole";
      items.push("slices of " + s.size + " pods in one " + s.tier + " (" + (s.required ? "required" : "preferred") +
        "): " + where);
    }
    items.push("traffic: " + (g.traffic || "all-to-all") + " (the pattern its slowdown is priced with)");
    items.push("priority " + g.priority);
    const p = g.preemption;
    if (p) {
      items.push("preempted " + p.victims.length + (p.victimsMore ? " + " + p.victimsMore : "") + " workload(s) to clear " +
        p.domain + " at " + since(p.at) + (p.clearedAt ? "; all gone at " + since(p.clearedAt) : "; victims still terminating"));
    }
    const by = g.preemptedBy;
    if (by) items.push("preempted by " + by.gang + " (priority " + by.priority + ") to clear " + by.domain + " at " + since(by.at));
    panel.hidden = false;
    panel.replaceChildren(el("h2", { text: "Constraints of " + g.namespace + "/" + g.name }),
      el("ul", { id: "gang-constraints" }, ...items.map((t) => el("li", { text: t }))));
    if (p && p.victims.length) {
      panel.append(el("h3", { text: "Victims" }), el("ul", { id: "gang-victims" }, ...p.victims.map((v) =>
        el("li", { text: v.namespace + "/" + v.name + " (priority " + v.priority + ", " + v.gpus + " GPUs)" }))));
    }
  }
  function renderReport(doc) {
    const report = doc.report;
    const section = $("report");
    if (!report) return;
    section.hidden = false;
    section.replaceChildren(el("h2", { text: "Simulation" }));
    if (report.summary) section.append(el("pre", { text: report.summary }));
    for (const plot of report.plots || []) {
      if (typeof plot === "string" && plot.startsWith("data:image/png;base64,")) section.append(el("img", { src: plot, alt: "plots" }));
    }
    const table = el("table", { id: "jobs" });
    const cols = report.columns || [];
    table.append(el("thead", {}, el("tr", {}, ...cols.map((c) => el("th", { text: c })))));
    const body = el("tbody");
    for (const row of report.jobs || []) body.append(el("tr", {}, ...row.map((c) => el("td", { text: c === null ? "-" : c }))));
    table.append(body);
    section.append(el("h2", { text: "Jobs" }), table);
  }

  // A gang's diagnosis (/api/diagnose): asked on a click, never by the poll; the server caches
  // it and limits how often a gang is diagnosed (429/503 say when to ask again).
  async function diagnose() {
    const key = ui.gang;
    if (!key) return;
    const q = new URLSearchParams({ gang: key, since: $("diagnose-since").value });
    ui.diagnosis = { key, status: 0, body: {} };
    renderDiagnosis();
    let status = 0, body = {};
    try {
      const response = await fetch("/api/diagnose?" + q.toString(), { cache: "no-store" });
      status = response.status;
      body = await response.json().catch(() => ({}));
      if (response.headers.get("Retry-After")) body.retryAfter = response.headers.get("Retry-After");
    } catch (e) {
      body = { error: "no answer" };
    }
    if (ui.diagnosis && ui.diagnosis.key === key) ui.diagnosis = { key, status, body };
    renderDiagnosis();
  }
  function causeItem(c) {
    const head = fmt(c.score, 2) + "  " + c.category + ": " + c.element + (c.recovered ? " (recovered)" : "") +
      (c.since ? ", since " + c.since : "");
    return el("li", { class: "cause" }, el("span", { text: head }),
      el("ul", { class: "evidence" }, ...(c.evidence || []).map((e) => el("li", { text: e }))));
  }
  function renderDiagnosis() {
    const panel = $("diagnosis");
    const d = ui.diagnosis;
    if (!d || d.key !== ui.gang) { ui.diagnosis = null; panel.hidden = true; panel.replaceChildren(); return; }
    panel.hidden = false;
    if (d.status === 0) { panel.replaceChildren(el("p", { text: "diagnosing " + d.key + " ..." })); return; }
    const r = d.body;
    if (d.status !== 200) {
      panel.replaceChildren(el("p", { class: "error", text: "the diagnosis answered " + d.status + ": " +
        (r.error || "") + (r.retryAfter ? " (ask again in " + r.retryAfter + " s)" : "") }));
      return;
    }
    const job = r.job || {};
    const span = r.window || {};
    panel.replaceChildren(
      el("h2", { text: "Diagnosis of " + job.namespace + "/" + job.name }),
      el("p", { text: span.from + " to " + span.to + "; Prometheus: " + (r.prometheus || "none (telemetry not measured)") }),
      el("h3", { text: "Verdict" }),
      el("ol", { id: "causes" }, ...(r.causes || []).map(causeItem)),
      el("p", { text: r.recovered === true ? "recovered at " + r.recoveredAt : r.recovered === false ? "not recovered by the window's end" : "" }));
    const changes = r.changes || [];
    if (changes.length) {
      panel.append(el("h3", { text: "Recent changes" }),
        el("ul", {}, ...changes.slice(-20).map((c) => el("li", { text: c.time + "  " + c.kind + ": " + c.what }))));
    }
    const missing = r.notMeasured || [];
    if (missing.length) {
      panel.append(el("h3", { text: "Not measured (" + missing.length + " signals)" }),
        el("ul", { id: "not-measured", class: "not-measured" },
          ...missing.map((m) => el("li", { text: m.category + ": " + m.signal + " (" + m.metric + "): " + m.why }))));
    }
    if ((r.notes || []).length) panel.append(el("h3", { text: "Notes" }), el("ul", {}, ...r.notes.map((n) => el("li", { text: n }))));
  }

  function render() {
    const doc = ui.doc;
    if (!doc) return;
    $("title").textContent = doc.topology ? "- " + doc.topology : "";
    const select = $("topology");
    select.replaceChildren(...doc.topologies.map((t) => el("option", { value: t, text: t, selected: t === doc.topology ? "selected" : null })));
    const s = doc.fabric ? doc.fabric.summary : null;
    $("summary").textContent = s ? s.hosts + " hosts, GPUs " + s.used + " used / " + s.reserved + " reserved / " +
      s.free + " free; " + s.degraded + " degraded, " + s.down + " down" : "";
    $("messages").textContent = doc.messages.join("; ");
    const index = renderFabric(doc);
    renderGangs(doc);
    renderElements(doc);
    renderPending(doc);
    highlight(doc, index);
    renderGangDetail(doc);
    $("diagnose-bar").hidden = !ui.gang || Boolean(embedded);
    if (ui.diagnosis && ui.diagnosis.key !== ui.gang) renderDiagnosis();
  }
  function selectGang(key) { ui.gang = ui.gang === key ? null : key; ui.element = null; render(); }
  function selectElement(id) { ui.element = ui.element === id ? null : id; ui.gang = null; render(); }

  function dataUrl() {
    const q = new URLSearchParams();
    for (const key of ["topology", "namespace", "gang"]) if (params.get(key)) q.set(key, params.get(key));
    const text = q.toString();
    return "/api/state" + (text ? "?" + text : "");
  }
  async function poll() {
    try {
      const headers = ui.etag ? { "If-None-Match": ui.etag } : {};
      const response = await fetch(dataUrl(), { headers, cache: "no-store" });
      if (response.status === 200) {
        ui.etag = response.headers.get("ETag");
        ui.doc = normalise(await response.json());
        render();
        $("live").textContent = "live, version " + ui.doc.version;
      } else if (response.status !== 304) {
        const body = await response.json().catch(() => ({}));
        $("messages").textContent = "the data endpoint answered " + response.status + (body.error ? ": " + body.error : "");
      }
    } catch (e) {
      $("live").textContent = "connection lost, retrying";
    }
    window.setTimeout(poll, POLL_MS);
  }

  for (const id of ["filter-text", "filter-phase", "filter-degraded"]) $(id).addEventListener("input", render);
  $("unzoom").addEventListener("click", () => { ui.zoom = null; render(); });
  $("diagnose").addEventListener("click", diagnose);
  $("clear").addEventListener("click", () => { ui.gang = null; ui.element = null; render(); });
  $("topology").addEventListener("change", (e) => {
    params.set("topology", e.target.value);
    window.history.replaceState(null, "", "?" + params.toString());
    ui.etag = null; ui.zoom = null;
  });
  if (embedded) {
    ui.doc = normalise(JSON.parse(embedded.textContent));
    $("live").textContent = "static report";
    $("topology").disabled = true;
    render();
    renderReport(ui.doc);
  } else {
    poll();
  }
})();
