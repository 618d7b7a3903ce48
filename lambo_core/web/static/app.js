// lambo serve-web's page: polls the read-only API and renders it. No build step, no CDN:
// cytoscape.min.js is served beside this file. Text from the memory is always set with
// textContent, never as HTML.
"use strict";

(function () {
  const PULSE_MS = 2000;
  const FEED_MS = 1500;
  const FEED_KEEP = 200;
  const STATUS_COLOURS = {
    Canonical: "#e8c15a", Venerable: "#5ad18a", Candidate: "#5ab0ff", None: "#8593a3",
  };
  const EDGE_COLOURS = {
    contradicts: "#ff6b6b", dependency: "#5ab0ff", hierarchical: "#b58cff",
    produces: "#5ad18a", modifies: "#5ad18a", supersedes_suspected: "#ffb347",
  };

  // a credential, when the window has one, rides in the address's fragment (#token=...),
  // which the browser never sends to the server on its own
  const fragment = new URLSearchParams(location.hash.slice(1));
  const token = fragment.get("token");

  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  };

  async function api(path, params) {
    const url = new URL(path, location.origin);
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
    }
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const response = await fetch(url, { headers });
    const body = await response.json();
    if (!response.ok) throw new Error(body.message || ("HTTP " + response.status));
    return body;
  }

  // -- counts and health ------------------------------------------------------------------
  async function loadSession() {
    try {
      const s = await api("/api/session");
      $("session-name").textContent = s.session;
      document.title = "lambo · " + s.session;
      $("session-note").textContent =
        s.store_kind + " store · recall " + s.recall_mode + " · policy " + s.promotion_policy;
    } catch (err) {
      $("session-note").textContent = err.message;
    }
  }

  async function pulse() {
    try {
      const p = await api("/api/pulse");
      $("count-concepts").textContent = p.concepts;
      $("count-edges").textContent = p.edges;
      $("count-interactions").textContent = p.interactions;
      $("count-canonical").textContent = p.canonical;
      $("count-pending").textContent = p.pending_writes;
      $("last-write").textContent = p.last_write_at || "none yet";
      $("served").textContent = p.served ? "a serve holds it" : "no serve holds it";
      const health = $("health");
      health.dataset.health = p.health;
      health.textContent = p.health === "ok" ? "healthy" : p.problems.join("; ");
    } catch (err) {
      $("health").dataset.health = "down";
      $("health").textContent = "window unreachable";
    }
  }

  // -- the feed ---------------------------------------------------------------------------
  let cursor = null;

  function feedItem(e) {
    const li = el("li", e.kind);
    li.dataset.kind = e.kind;
    li.appendChild(el("div", "at", e.at));
    if (e.kind === "write") {
      const tool = e.tool.replace(/^lambo_/, "");
      li.appendChild(el("div", null, e.agent_id + " · " + tool + " · " + e.state));
      if (e.detail) li.appendChild(el("div", "muted small", e.detail));
      for (const c of e.created) {
        const a = el("a", "small", "+ " + c.label);
        a.addEventListener("click", () => openConcept(c.node_id));
        li.appendChild(el("div")).appendChild(a);
      }
    } else {
      const arrow = e.kind === "promotion" ? "▲" : "▼";
      const a = el("a", null, e.label || e.short_id);
      a.addEventListener("click", () => openConcept(e.node_id));
      li.appendChild(a);
      const radius = e.blast_radius !== null ? " · blast radius " + e.blast_radius : "";
      li.appendChild(el("div", "small", arrow + " " + e.from + " → " + e.to + radius));
    }
    return li;
  }

  async function pollFeed() {
    try {
      const f = await api("/api/events", cursor === null ? {} : { since: cursor });
      const feed = $("feed");
      for (const e of f.events) feed.insertBefore(feedItem(e), feed.firstChild);
      while (feed.children.length > FEED_KEEP) feed.removeChild(feed.lastChild);
      cursor = f.cursor;
      if (f.more) setTimeout(pollFeed, 0);
    } catch (err) {
      /* the pulse says the window is down; try again on the next tick */
    }
  }

  // -- recall -----------------------------------------------------------------------------
  function lineClass(line) {
    if (/^⚠ (Contradicted|Contradicts|Rests on)/.test(line)) return "line-contradiction";
    if (line.startsWith("⚑")) return "line-pillar";
    if (line.startsWith("⚡")) return "line-risk";
    if (line.startsWith("⤓") || line.startsWith("⚠ Possibly superseded")) return "line-superseded";
    if (/\(score [0-9.]+, id [0-9a-f]{8}/.test(line)) return "line-hit";
    return "line-note";
  }

  function renderRecall(r) {
    const out = $("recall-out");
    out.replaceChildren();
    const ids = {};
    for (const hit of r.hits) ids[hit.node_id.replace(/-/g, "").slice(0, 8)] = hit;
    for (const line of r.context.split("\n")) {
      const div = el("div", "line " + lineClass(line), line || " ");
      const m = /\(score [0-9.]+, id ([0-9a-f]{8})/.exec(line);
      if (m && ids[m[1]]) {
        const hit = ids[m[1]];
        div.dataset.nodeId = hit.node_id;
        div.title = "open this concept";
        div.addEventListener("click", () => openConcept(hit.node_id));
        if (Array.isArray(hit.annotations) && hit.annotations.length) {
          const box = el("div", "annotations");
          for (const a of hit.annotations) {
            box.appendChild(el("span", "annotation kind-" + a.kind, a.kind));
          }
          div.appendChild(box);
        }
      }
      out.appendChild(div);
    }
    $("recall-legend").hidden = false;
  }

  $("recall-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const err = $("recall-error");
    err.hidden = true;
    try {
      renderRecall(await api("/api/recall", { q: $("recall-q").value, top_k: $("recall-k").value }));
    } catch (e) {
      err.textContent = e.message;
      err.hidden = false;
    }
  });

  // -- a concept and its gates ------------------------------------------------------------
  let focus = null;

  function renderGates(admission) {
    const box = $("gates");
    box.replaceChildren();
    if (!admission) {
      box.appendChild(el("div", "muted", "the store did not answer for the gates"));
      return;
    }
    const stage = el("div", "stage " + admission.status.toLowerCase());
    stage.textContent = admission.next
      ? admission.status + " → " + admission.next + (admission.eligible ? " (eligible)" : " (not yet)")
      : admission.status + " (the last stage)";
    stage.id = "gate-stage";
    box.appendChild(stage);
    for (const c of admission.checks) {
      const row = el("div", "gate " + (c.met ? "met" : "unmet"));
      row.dataset.gate = c.gate;
      row.appendChild(el("span", "mark", c.met ? "✓" : "•"));
      row.appendChild(el("span", null, c.gate));
      const current = c.current === null ? "–" : Number(c.current).toFixed(
        Number.isInteger(c.current) ? 0 : 2);
      row.appendChild(el("span", "muted small", current + " " + c.comparison + " " + c.bar));
      const bar = el("div", "bar");
      const fill = el("div", "fill");
      const ratio = c.bar > 0 && c.current !== null ? Math.min(1, c.current / c.bar) : (c.met ? 1 : 0);
      fill.style.width = Math.round(ratio * 100) + "%";
      bar.appendChild(fill);
      row.appendChild(bar);
      box.appendChild(row);
    }
    for (const reason of admission.reasons) box.appendChild(el("div", "muted small", reason));
  }

  async function openConcept(id) {
    try {
      const c = await api("/api/inspect", { focus: id });
      focus = c.node_id;
      $("concept-panel").hidden = false;
      $("concept-id").textContent = c.node_id;
      const head = $("concept-head");
      head.replaceChildren(
        el("div", "content", c.content),
        el("div", "muted small", c.concept_type + " · " + c.status + " · blast radius " +
          c.blast_radius + " · by " + c.agent_id + " at " + c.created_at),
      );
      const warnings = $("concept-warnings");
      warnings.replaceChildren();
      for (const w of c.warnings || []) warnings.appendChild(el("div", "line " + lineClass(w), w));
      renderGates(c.admission);
      const edges = $("concept-edges");
      edges.replaceChildren();
      const names = {};
      for (const n of c.neighbours) names[n.node_id] = n.label;
      names[c.node_id] = "this";
      for (const e of c.edges.slice(0, 60)) {
        edges.appendChild(el("li", null,
          (names[e.src] || e.src.slice(0, 8)) + " —" + e.edge_type + "→ " +
          (names[e.dst] || e.dst.slice(0, 8))));
      }
      if (!$("graph-panel").hidden) showGraph();
      $("concept-panel").scrollIntoView({ behavior: "smooth", block: "nearest" });
    } catch (err) {
      $("recall-error").textContent = err.message;
      $("recall-error").hidden = false;
    }
  }

  // -- the graph --------------------------------------------------------------------------
  let cy = null;

  async function showGraph() {
    if (!focus) return;
    const g = await api("/api/graph", { focus, depth: $("graph-depth").value });
    $("graph-panel").hidden = false;
    $("graph-note").textContent = g.nodes.length + " nodes, " + g.edges.length + " edges" +
      (g.truncated ? " (capped)" : "");
    const elements = [];
    for (const n of g.nodes) {
      elements.push({ data: {
        id: n.id, label: n.label.length > 40 ? n.label.slice(0, 39) + "…" : n.label,
        status: n.status || "None", focus: n.hop === 0 ? 1 : 0, hop: n.hop,
      } });
    }
    g.edges.forEach((e, i) => elements.push({ data: {
      id: "e" + i, source: e.source, target: e.target, type: e.edge_type,
    } }));
    if (cy) cy.destroy();
    cy = cytoscape({
      container: $("graph"),
      elements,
      // rings by hop: the focus in the middle, what touches it around it, and so on out
      layout: {
        name: "concentric", animate: false, minNodeSpacing: 50,
        concentric: (n) => 10 - n.data("hop"), levelWidth: () => 1,
      },
      style: [
        { selector: "node", style: {
          "background-color": (n) => STATUS_COLOURS[n.data("status")] || "#8593a3",
          label: "data(label)", color: "#dce3ea", "font-size": 9, "text-wrap": "wrap",
          "text-max-width": 120, "text-valign": "bottom", "text-margin-y": 4,
          width: 18, height: 18,
        } },
        { selector: "node[focus = 1]", style: {
          width: 30, height: 30, "border-width": 3, "border-color": "#ffffff",
        } },
        { selector: "edge", style: {
          width: 1.5, "curve-style": "bezier", "target-arrow-shape": "triangle",
          "line-color": (e) => EDGE_COLOURS[e.data("type")] || "#3a4656",
          "target-arrow-color": (e) => EDGE_COLOURS[e.data("type")] || "#3a4656",
        } },
      ],
    });
    cy.on("tap", "node", (evt) => openConcept(evt.target.id()));
    window.lamboGraph = cy; // for a test (or a curious person) to ask what is drawn
  }

  $("show-graph").addEventListener("click", () => {
    showGraph().catch((err) => {
      $("graph-note").textContent = err.message;
    });
  });
  $("graph-depth").addEventListener("change", () => showGraph().catch(() => {}));

  loadSession();
  pulse();
  pollFeed();
  setInterval(pulse, PULSE_MS);
  setInterval(pollFeed, FEED_MS);
})();
