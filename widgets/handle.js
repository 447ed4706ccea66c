// The unity_nb handle widget (anywidget ESM, no build step).
// State comes from Python (nodes, entries, asks, notice); clicks go back as
// {action, node, text, call_id} messages that call the public handle API.

const ENDED = new Set(["finished", "stopped", "failed"]);
const BADGE = { running: "running", paused: "paused", waiting: "waiting for you", idle: "idle: waiting for a request", finished: "finished", stopped: "stopped", failed: "failed" };

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) el.append(c);
  return el;
}

// both quotes too: markdown() puts escaped text inside single-quoted attributes (a link's href)
function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

// A small markdown renderer: headings, lists, code blocks, inline code, bold, italics, links.
export function markdown(src) {
  const lines = esc(src).split("\n");
  let out = "", inCode = false, inList = false;
  for (const line of lines) {
    if (line.startsWith("```")) { out += inCode ? "</pre>" : "<pre class='unb-code'>"; inCode = !inCode; continue; }
    if (inCode) { out += line + "\n"; continue; }
    const item = line.match(/^\s*[-*] (.*)/);
    if (item && !inList) { out += "<ul>"; inList = true; }
    if (!item && inList) { out += "</ul>"; inList = false; }
    let html = (item ? item[1] : line)
      .replace(/`([^`]+)`/g, "<code>$1</code>")
      .replace(/\*\*([^*]+)\*\*/g, "<b>$1</b>")
      .replace(/\*([^*]+)\*/g, "<i>$1</i>")
      .replace(/\[([^\]]+)\]\((https?:[^)]+)\)/g, "<a href='$2' target='_blank'>$1</a>");
    const head = html.match(/^(#{1,4}) (.*)/);
    if (head) out += `<h${head[1].length + 2}>${head[2]}</h${head[1].length + 2}>`;
    else if (item) out += `<li>${html}</li>`;
    else if (html.trim()) out += `<p>${html}</p>`;
  }
  if (inList) out += "</ul>";
  if (inCode) out += "</pre>";
  return out;
}

// Python highlighting: comments, strings, keywords, numbers; every piece escaped.
const PY = /(#[^\n]*)|("""[\s\S]*?"""|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")|\b(and|as|assert|async|await|break|class|continue|def|del|elif|else|except|finally|for|from|global|if|import|in|is|lambda|None|nonlocal|not|or|pass|raise|return|True|False|try|while|with|yield)\b|\b(\d[\d_]*(?:\.\d+)?)\b/g;
export function highlightPython(code) {
  let out = "", last = 0;
  for (const m of code.matchAll(PY)) {
    const cls = m[1] ? "unb-c" : m[2] ? "unb-s" : m[3] ? "unb-k" : "unb-n";
    out += esc(code.slice(last, m.index)) + `<span class="${cls}">${esc(m[0])}</span>`;
    last = m.index + m[0].length;
  }
  return out + esc(code.slice(last));
}

function codeOf(call) {
  try {
    const args = JSON.parse(call.arguments);
    if (args && typeof args.code === "string") return args;
  } catch (e) { /* arguments may be truncated or not JSON */ }
  return null;
}

function renderDisplay(d) {
  // rich output a plan displayed (a DataFrame, a figure): as a notebook output would show it
  const box = h("div", { class: "unb-display" });
  if (d["image/png"] || d["image/jpeg"]) {
    const mime = d["image/png"] ? "image/png" : "image/jpeg";
    box.append(h("img", { src: `data:${mime};base64,${d[mime]}`, alt: d["text/plain"] || "figure" }));
  } else if (d["text/html"]) {
    box.innerHTML = d["text/html"];
  } else {
    box.append(h("pre", { class: "unb-output" }, d["text/plain"] || ""));
  }
  return box;
}

function renderEntry(entry, isOpen, waiting) {
  const kind = entry.kind;
  if (kind === "system" || kind === "context") return null;
  if (entry.role === "tool" && kind === "tool_result") return null; // shown inside its call
  const cls = `unb-entry unb-${entry.role} unb-${kind}${entry.error ? " unb-error" : ""}`;
  if (kind === "task") return h("div", { class: cls }, h("span", { class: "unb-label" }, "task"), " ", entry.content);
  if (kind === "steering" || kind === "interjection") {
    const label = kind === "interjection" ? "interjection" : "steering";
    return h("div", { class: cls }, h("span", { class: "unb-label" }, label), " ", entry.content);
  }
  if (kind === "request") return h("div", { class: cls }, h("span", { class: "unb-label" }, `request ${entry.name || ""}`), " ", entry.content);
  if (kind === "evaluation" || kind === "compression") return h("div", { class: cls }, h("span", { class: "unb-label" }, kind), " ", entry.content);
  if (kind === "notification") return h("div", { class: cls }, h("span", { class: "unb-label" }, `note from ${entry.name || "tool"}`), " ", entry.content);
  if (kind === "clarification") return h("div", { class: cls }, h("span", { class: "unb-label" }, entry.role === "user" ? "you answered" : "question"), " ", entry.content);
  if (kind === "interrupted") return h("div", { class: `${cls} unb-cutoff` }, h("span", { class: "unb-text" }, entry.content || ""),
    h("span", { class: "unb-cut" }, " … [cut off]")); // a reply an interjection or a stop cut off
  const el = h("div", { class: cls });
  if (entry.thinking) el.append(h("details", { class: "unb-thinking" }, h("summary", {}, "thinking"), h("div", { class: "unb-text" }, entry.thinking)));
  if (entry.content) {
    const body = h("div", { class: kind === "answer" ? "unb-answer" : "unb-text" });
    body.innerHTML = kind === "answer" ? markdown(entry.content) : esc(entry.content);
    if (kind === "answer" && entry.name) el.append(h("span", { class: "unb-label" }, `answer to ${entry.name}`));
    el.append(body);
  }
  for (const call of entry.calls || []) {
    const details = h("details", { class: `unb-call${call.error ? " unb-error" : ""}${call.skipped ? " unb-skipped" : ""}${codeOf(call) ? " unb-plan" : ""}`, "data-call": call.id });
    if (isOpen(call.id)) details.open = true;
    // a call the person skipped did not run: it says so, not "done"
    const state = call.result === null ? (waiting.has(call.id) ? "waiting for approval" : "running...") : call.skipped ? "skipped" : call.error ? "error" : "done";
    details.append(h("summary", {}, h("code", {}, call.name), ` ${state}`, call.child ? ` (sub-operation below)` : ""));
    const code = codeOf(call);
    if (code) {
      if (code.intent) details.append(h("div", { class: "unb-intent" }, code.intent));
      const pre = h("pre", { class: "unb-code unb-python" });
      pre.innerHTML = highlightPython(code.code);
      details.append(pre);
    } else {
      details.append(h("pre", { class: "unb-args" }, call.arguments));
    }
    // what it printed, then its result: each labelled and styled apart from the code above
    if (call.output) details.append(h("div", { class: "unb-label" }, "printed"), h("pre", { class: "unb-output" }, call.output));
    if (call.result !== null) {
      details.append(h("div", { class: "unb-label" }, call.error ? "error" : "result"),
        h("pre", { class: `unb-result${call.error ? " unb-error" : ""}` }, call.result));
    }
    el.append(details);
    for (const d of call.displays || []) el.append(renderDisplay(d));
  }
  return el;
}

// The plans (calls with code) of a node, oldest first.
function plansOf(list) {
  const out = [];
  for (const e of list || []) for (const c of e.calls || []) if (codeOf(c)) out.push(c.id);
  return out;
}

// a widget whose kernel does not answer a ping within this many ms is dead (a notebook reopened with its
// widget state saved, a kernel gone): it shows the state as saved, greyed, with its buttons disabled
const DEAD_AFTER = 5000;
const PING_EVERY = 10000; // while the operation runs, its kernel may go away: asked again this often
const DEAD_NOTE = "This operation's kernel is gone; the state shown is as saved.";

const nearBottom = (el) => el.scrollHeight - el.scrollTop - el.clientHeight < 24;

// Enter in a text box sends it, as people expect; the key stays in the box (JupyterLab's notebook
// would otherwise read it as its own shortcut)
function onEnter(input, action) {
  input.addEventListener("keydown", (e) => {
    if (e.key !== "Enter" || e.shiftKey || e.isComposing) return;
    e.preventDefault();
    e.stopPropagation();
    action();
  });
}

// a click needing text, with an empty box, sends nothing: the box says so, and takes the keys
function needText(input, says) {
  input.placeholder = says;
  input.focus();
}

function render({ model, el }) {
  // the stylesheet's rules all name this id (the installed version's): see _widget.style()
  const root = h("div", { class: "unb-root", "data-unb-style": model.get("_anywidget_id") || "" });
  const notice = h("div", { class: "unb-notice" });
  const deadNote = h("div", { class: "unb-dead-note" });
  const tree = h("div", { class: "unb-tree" });
  root.append(deadNote, notice, tree);
  el.append(root);
  const views = new Map(); // node id -> persistent elements

  const send = (action, node, text, call_id) => model.send({ action, node, text, call_id });

  function view(node) {
    let v = views.get(node.id);
    if (v) return v;
    // the steering buttons are made from the kernel's table of verbs (model "verbs"): see controlsOf
    const input = h("input", { class: "unb-input", type: "text" });
    // Enter sends the box with the first verb that needs a message (interject)
    onEnter(input, () => { const first = v.verbs.find((s) => s.message === "required"); if (first) steer(v, first); });
    const header = h("div", { class: "unb-header" });
    const controls = h("div", { class: "unb-controls" }, input);
    const clar = h("div", { class: "unb-clarifications" });
    const approvals = h("div", { class: "unb-approvals" });
    const retry = h("div", { class: "unb-retry" });
    const batch = h("div", { class: "unb-batch" }); // a batch (u.map): its progress bar and its failures
    const transcript = h("div", { class: "unb-transcript" });
    const streaming = h("div", { class: "unb-streaming" });
    // the transcript and the text streaming in scroll in a box of capped height, which follows
    // the newest entry unless the person has scrolled up (then it stays put until they are back at the bottom)
    const scroll = h("div", { class: "unb-scroll" }, transcript, streaming);
    const asks = h("div", { class: "unb-asks" });
    const box = h("div", { class: "unb-node", "data-node": node.id }, header, controls, batch, retry, clar, approvals, scroll, asks);
    box.style.marginLeft = `${node.depth * 18}px`;
    v = {
      box, header, controls, input, buttons: [], verbs: [], verbKey: null, clar, approvals, retry, batch, scroll, transcript, streaming, asks, node,
      clarKey: "", approvalKey: "", follow: true, answers: new Map(), waitingRows: new Map(), // call id -> its question's or approval's box, kept while it waits
      autoOpen: new Set(), userOpen: new Set(), userClosed: new Set(), // which plans are expanded, and who decided
    };
    scroll.addEventListener("scroll", () => { v.follow = nearBottom(scroll); });
    // a person opening a call to read it: the box stays put unless that left it at the bottom
    // (toggle does not bubble; the widget's own openings come before it scrolls, so they leave it following)
    transcript.addEventListener("toggle", () => { v.follow = nearBottom(scroll); }, true);
    views.set(node.id, v);
    return v;
  }

  // a verb's button: one with an undo (pause) does that verb instead (resume) while the node is in its status
  const current = (v, spec) => (spec.undo && v.node.status === spec.undo.status ? spec.undo : spec);
  // a verb that takes no message is a click; one that needs a message sends the box (nothing when it is
  // empty); one whose message is optional sends the box as it is, empty or not
  function steer(v, spec) {
    const text = v.input.value.trim() ? v.input.value : "";
    if (spec.message === "required" && !text) return needText(v.input, `Type a message first, then ${spec.label}`);
    send(spec.name, v.node.id, spec.message === "none" ? null : text || null);
    if (spec.message !== "none" && text) { v.input.value = ""; v.input.placeholder = v.placeholder; }
  }
  // the controls, from the table: the buttons of verbs needing no message, the box, those needing one
  function controlsOf(v, verbs) {
    v.verbs = verbs;
    v.buttons = verbs.map((spec) => {
      const b = h("button", { class: `unb-btn unb-${spec.name}`, title: spec.doc || "", onclick: () => steer(v, current(v, spec)) }, spec.label);
      b.spec = spec;
      return b;
    });
    const texts = verbs.filter((s) => s.message === "required").map((s, i) => (i ? s.label.toLowerCase() : `${s.label} (Enter)`));
    v.input.placeholder = v.placeholder = texts.length > 1 ? `${texts.slice(0, -1).join(", ")} or ${texts[texts.length - 1]}...` : `${texts[0] || "Message"}...`;
    v.input.hidden = !verbs.some((s) => s.message !== "none");
    const before = v.buttons.filter((b) => b.spec.message !== "required");
    v.controls.replaceChildren(...before, v.input, ...v.buttons.filter((b) => !before.includes(b)));
  }

  function renderBatch(v, node) {
    const p = node.progress;
    v.batch.innerHTML = "";
    if (!p) return;
    // every count, the percentage and the money come written from one source (the batch's progress["text"]):
    // done + running + queued + failed + stopped + not started = total, dollars to two significant digits
    v.batch.append(
      h("div", { class: "unb-bar" },
        h("div", { class: "unb-bar-done", style: `width: ${p.total ? (100 * p.done) / p.total : 0}%` }),
        h("div", { class: "unb-bar-failed", style: `width: ${p.total ? (100 * (p.failed + p.stopped)) / p.total : 0}%` })),
      h("div", { class: "unb-bar-text" }, p.text || ""));
    // an operator's own line (a join's recall: estimated, bounded, widened or every pair asked)
    if (p.recall && p.recall.text) v.batch.append(h("div", { class: "unb-bar-text unb-recall" }, p.recall.text));
    // top-k: the model's comparisons contradict each other (A over B, B over C, C over A): said, never hidden
    if (p.inconsistent) v.batch.append(h("div", { class: "unb-bar-text unb-inconsistent" }, `${p.inconsistent} inconsistent comparison cycle(s): the order is not exact`));
    // once it has ended: the first rows of its result (what awaiting it gives)
    const pv = node.preview;
    if (pv && pv.rows.length) {
      const table = h("table", { class: "unb-preview-table" },
        h("tr", {}, h("th", {}, ""), ...pv.columns.map((c) => h("th", {}, c))),
        ...pv.rows.map((r) => h("tr", {}, ...r.map((c, i) => h(i ? "td" : "th", {}, c)))));
      const more = pv.answered > pv.rows.length ? ` of ${pv.answered} answered` : "";
      v.batch.append(h("div", { class: "unb-preview" },
        h("div", { class: "unb-label" }, `first rows${more} · await ${node.name} for all, or %unity show ${node.name}`), table));
    }
    if (node.failures && node.failures.length) {
      const list = h("details", { class: "unb-failures" }, h("summary", {}, `${node.failures.length} row(s) failed or stopped`));
      for (const f of node.failures) {
        const item = h("div", { class: "unb-failure" }, h("b", {}, f.key), ` ${f.status}: ${f.reason}`);
        if (f.node) { // its loop is kept: open it (it is shown as a child below)
          item.append(" ", h("button", { class: "unb-btn", onclick: () => { const o = views.get(f.node); if (o) o.box.scrollIntoView(); } }, "open"));
        }
        list.append(item);
      }
      v.batch.append(list);
    }
  }

  function update() {
    // what the person is typing in (its caret and selection) survives the update, whatever it rebuilds
    const typing = root.contains(document.activeElement) ? document.activeElement : null;
    const caret = typing && typing.tagName === "INPUT" ? [typing.selectionStart, typing.selectionEnd, typing.selectionDirection] : null;
    const nodes = model.get("nodes") || [];
    const entries = model.get("entries") || {};
    const asks = model.get("asks") || [];
    const queued = model.get("subshells") === false && model.get("cell_running")
      ? "A cell is running. This kernel takes clicks only between cells (no kernel subshells, as in VS Code or Colab), so a click acts when the cell ends."
      : "";
    notice.textContent = [model.get("notice") || "", queued].filter(Boolean).join(" ");
    const order = [];
    for (const node of nodes) {
      const v = view(node);
      v.node = node;
      order.push(v.box);
      const ended = ENDED.has(node.status);
      v.header.innerHTML = "";
      v.header.append(
        h("span", { class: "unb-name" }, node.name),
        // what the operation is (map, filter, an operator registered later): not shown for a plain loop or a row
        node.kind && node.kind !== "loop" && node.depth === 0 ? h("span", { class: "unb-kind" }, node.kind) : "",
        // a batch that finished with rows failed or stopped does not look like a success
        node.progress && node.progress.outcome === "finished with failures"
          ? h("span", { class: "unb-badge unb-partial" }, "finished with failures")
          : h("span", { class: `unb-badge unb-${node.status}` }, BADGE[node.status] || node.status),
        h("span", { class: "unb-stats" }, `${node.steps} steps · ${node.tool_calls} tool calls · ${node.tokens_estimated ? "≈" : ""}${node.tokens_in}/${node.tokens_out} tokens${node.tokens_estimated ? " (estimated)" : ""} · ${node.elapsed}s · ${node.model}`),
      );
      // the buttons are made again only when the table changes (a verb registered meanwhile): a button taken
      // out of the page under a person's pointer loses the click
      const verbs = model.get("verbs") || [];
      const verbKey = JSON.stringify(verbs);
      if (verbKey !== v.verbKey) { v.verbKey = verbKey; controlsOf(v, verbs); }
      for (const b of v.buttons) {
        const spec = current(v, b.spec);
        if (b.textContent !== spec.label) b.textContent = spec.label;
        if (b.title !== (spec.doc || "")) b.title = spec.doc || "";
      }
      renderBatch(v, node);
      for (const b of [...v.buttons, v.input]) b.disabled = ended;
      // clarifications: question and answer box, rebuilt only when they change
      const key = JSON.stringify(node.clarifications);
      if (key !== v.clarKey) {
        v.clarKey = key;
        const answers = new Map();
        for (const c of node.clarifications) {
          // a question still waiting keeps its box (and what the person has typed in it) across updates
          let row = v.answers.get(c.call_id);
          if (!row) {
            const answer = h("input", { class: "unb-input", type: "text", placeholder: "Your answer (Enter)" });
            const reply = () => (answer.value.trim() ? send("answer", node.id, answer.value, c.call_id)
              : needText(answer, "Type your answer first (Enter sends it)"));
            onEnter(answer, reply);
            row = h("div", { class: "unb-clarification" }, h("b", {}, "Question: "), c.question, " ", answer,
              h("button", { class: "unb-btn", onclick: reply }, "Answer"));
          }
          answers.set(c.call_id, row);
        }
        v.answers = answers;
        v.clar.replaceChildren(...answers.values());
      }
      // plans and tool calls waiting for the person: the code (or arguments), then Run or Skip
      const akey = JSON.stringify(node.approvals || []);
      if (akey !== v.approvalKey) {
        v.approvalKey = akey;
        const waitingNow = new Map();
        for (const a of node.approvals || []) {
          // a call still waiting keeps its box (and the reason typed in it) across updates
          let row = v.waitingRows.get(a.call_id);
          if (!row) {
            // a plan shows its code; a tool call (a.tool) its JSON arguments, as text
            const pre = h("pre", { class: a.tool ? "unb-code" : "unb-code unb-python" });
            if (a.tool) pre.textContent = a.code; else pre.innerHTML = highlightPython(a.code);
            const reason = h("input", { class: "unb-input", type: "text", placeholder: "Why skip? (optional; Enter skips)" });
            const skip = () => send("skip", node.id, reason.value, a.call_id);
            onEnter(reason, skip);
            // a tool's call (not a plan: each plan is read on its own) may be allowed for the rest of the operation
            const allow = a.tool ? h("button", { class: "unb-btn unb-allow", title: `Run it, and every later call of ${a.tool} in this operation without asking`,
              onclick: () => send("allow", node.id, null, a.call_id) }, `Always allow ${a.tool}`) : null;
            row = h("div", { class: "unb-approval", "data-call": a.call_id },
              h("b", {}, a.tool ? "Tool call waiting for your approval: " : "Plan waiting for your approval: "), a.intent, pre,
              h("div", { class: "unb-approval-actions" },
                h("button", { class: "unb-btn unb-run", onclick: () => send("approve", node.id, null, a.call_id) }, "Run"),
                allow,
                h("button", { class: "unb-btn unb-skip", onclick: skip }, "Skip"),
                reason));
          }
          waitingNow.set(a.call_id, row);
        }
        v.waitingRows = waitingNow;
        v.approvals.replaceChildren(...waitingNow.values());
      }
      // the transcript is rebuilt only when it changed, not at every streamed chunk, so a click
      // on a tool call (or a text selection) in it survives while the operation streams
      const top = v.scroll.scrollTop;
      const tkey = [entries[node.id], node.error, JSON.stringify(node.references || []), akey, node.cut_off, ended];
      if (!v.tkey || tkey.some((x, i) => x !== v.tkey[i])) {
        v.tkey = tkey;
        // a call's details stay as the person left them; of the plans, the newest is expanded
        // while the operation is live (the one running now), earlier ones collapse
        for (const d of v.transcript.querySelectorAll("details[data-call]")) {
          const id = d.getAttribute("data-call");
          if (v.autoOpen.has(id)) { if (!d.open) v.userClosed.add(id); }
          else if (d.open) v.userOpen.add(id);
          else v.userOpen.delete(id);
        }
        const waiting = new Set((node.approvals || []).map((a) => a.call_id));
        const plans = plansOf(entries[node.id]);
        // (a plan waiting for approval shows its code in the approval box above: not twice)
        const current = ended || waiting.has(plans[plans.length - 1]) ? null : plans[plans.length - 1];
        v.autoOpen = new Set(current && !v.userClosed.has(current) ? [current] : []);
        const isOpen = (id) => v.userOpen.has(id) || v.autoOpen.has(id);
        v.transcript.innerHTML = "";
        let failed = false;
        const list = entries[node.id] || [];
        let lastCut = -1; // a stop's fragment is shown below (node.cut_off), in its place before the stop
        if (node.cut_off) list.forEach((e, i) => { if (e.kind === "interrupted") lastCut = i; });
        for (const [i, e] of list.entries()) {
          if (i === lastCut) continue;
          const r = renderEntry(e, isOpen, waiting);
          if (r) v.transcript.append(r);
          failed = failed || e.kind === "error";
        }
        // a failure once: the transcript's own entry says it, when there is one
        if (node.error && !failed) v.transcript.append(h("div", { class: "unb-entry unb-error" }, node.error));
        if (node.cut_off) { // what was streaming when Stop came: before the stop's own entry, when that is last
          const cut = h("div", { class: "unb-entry unb-cutoff" }, h("span", { class: "unb-text" }, node.cut_off),
            h("span", { class: "unb-cut" }, " … [cut off by stop]"));
          const last = v.transcript.lastElementChild;
          if (last && last.classList.contains("unb-steering")) last.before(cut);
          else v.transcript.append(cut);
        }
        if (node.references && node.references.length) {
          const refs = h("div", { class: "unb-references" }, h("span", { class: "unb-label" }, "references"));
          for (const r of node.references) {
            const title = r.url ? h("a", { href: r.url, target: "_blank", rel: "noopener noreferrer" }, r.title) : h("span", {}, r.title);
            refs.append(h("div", { class: "unb-reference" }, `[${r.number}] `, title, r.text ? ` — ${r.text}` : ""));
          }
          v.transcript.append(refs);
        }
      }
      v.streaming.textContent = node.streaming || (!ended && node.reasoning ? `thinking: ${node.reasoning}` : "") ||
        (!ended && node.status !== "waiting" && node.thinking ? `… ${node.thinking}` : "");
      v.retry.textContent = node.retry || "";
      v.top = top;
      // each Ask's entry kept by its id and changed in place: its Stop button stays under a person's pointer
      const mine = asks.filter((a) => a.node === node.id);
      const askViews = v.askViews || (v.askViews = new Map());
      for (const [id, av] of askViews) if (!mine.some((a) => a.id === id)) { av.box.remove(); askViews.delete(id); }
      for (const a of mine) {
        let av = askViews.get(a.id);
        if (!av) {
          const badge = h("span", { class: "unb-badge" });
          const stop = h("button", { class: "unb-btn unb-ask-stop", title: "Stop this Ask (its model call too)",
            onclick: () => { stop.disabled = true; send("stop_ask", a.id); } }, "Stop");
          const text = h("div", { class: "unb-text" });
          const box = h("div", { class: "unb-ask-entry", "data-ask": a.id }, h("span", { class: "unb-label" }, "asked"),
            ` ${a.question} `, badge, " ", stop, text);
          av = { box, badge, stop, text };
          askViews.set(a.id, av);
        }
        if (av.box.parentNode !== v.asks) v.asks.append(av.box); // never moved once there: a click lands
        av.badge.className = `unb-badge unb-${a.status}`;
        av.badge.textContent = a.status;
        av.stop.hidden = ["finished", "failed", "stopped"].includes(a.status);
        av.text.textContent = a.answer || "";
      }
    }
    // move only the nodes that changed place: a button taken out of the page between a person's
    // mousedown and mouseup loses the click (at 10 updates a second, most clicks), and a text box taken
    // out loses its focus (a batch's rows come and go: JupyterLab then took the keys typed next)
    placeNodes(order);
    // a node no longer sent (a batch's row that ended) is let go of: its view, and so its elements, go too
    const present = new Set(nodes.map((n) => n.id));
    for (const id of views.keys()) if (!present.has(id)) views.delete(id);
    if (dead) for (const c of root.querySelectorAll("button, input")) c.disabled = true;
    if (typing && typing.isConnected && document.activeElement !== typing) {
      typing.focus({ preventScroll: true });
      if (caret) typing.setSelectionRange(...caret);
    }
    // then (each box in the page) the scroll: at the newest entry, or where the person left it
    for (const v of views.values()) v.scroll.scrollTop = v.follow ? v.scroll.scrollHeight : v.top;
    if (!root.isConnected) { // not in the page yet (a first render): follow once it is laid out
      requestAnimationFrame(() => { for (const v of views.values()) if (v.follow) v.scroll.scrollTop = v.scroll.scrollHeight; });
    }
  }

  function placeNodes(order) {
    const keep = new Set(order);
    for (const box of [...tree.children]) if (!keep.has(box)) box.remove(); // ended rows first: the rest keep their order
    order.forEach((box, i) => { if (tree.children[i] !== box) tree.insertBefore(box, tree.children[i] || null); });
  }

  // is there a kernel behind this view? A ping it answers with a pong (widget state saved in a notebook
  // brings the view back without one); any state it sends proves it too
  let dead = false, waiting = null;
  // this view, while live, hides its operation's snapshot output (placeSnapshots, below); the operation is the root
  const operation = ((model.get("nodes") || [])[0] || {}).id;
  let counted = false;
  const countLive = (flag) => { if (flag !== counted) { counted = flag; liveView(operation, flag); } };
  function setDead(flag) {
    if (flag === dead) return;
    dead = flag;
    countLive(!dead);
    root.classList.toggle("unb-dead", dead);
    deadNote.textContent = dead ? DEAD_NOTE : "";
    if (!dead) { // alive again (a busy kernel answered late): rebuild what was disabled
      for (const c of root.querySelectorAll("button, input")) c.disabled = false;
      for (const v of views.values()) { v.clarKey = v.approvalKey = ""; v.answers = new Map(); v.waitingRows = new Map(); }
    }
    update();
  }
  function alive() {
    if (waiting) { clearTimeout(waiting); waiting = null; }
    setDead(false);
  }
  function ping() {
    if (waiting) return;
    try { model.send({ action: "ping" }); } catch (e) { /* no kernel to send it to */ }
    waiting = setTimeout(() => {
      waiting = null;
      // a kernel without subshells answers once its cell ends: busy, not gone
      if (!(model.get("subshells") === false && model.get("cell_running"))) setDead(true);
    }, DEAD_AFTER);
  }
  const ticker = setInterval(() => {
    const first = (model.get("nodes") || [])[0];
    if (!first || !ENDED.has(first.status)) ping();
  }, PING_EVERY);
  model.on("msg:custom", (msg) => { if (msg && msg.pong) alive(); });

  for (const name of ["nodes", "entries", "asks", "notice", "verbs"]) model.on(`change:${name}`, () => { alive(); update(); });
  model.on("change:cell_running", () => update());
  model.on("change:_anywidget_id", () => root.setAttribute("data-unb-style", model.get("_anywidget_id") || ""));
  update();
  countLive(true);
  ping();
  return () => { clearInterval(ticker); if (waiting) clearTimeout(waiting); views.clear(); countLive(false); };
}

export default { render };

// Beside each widget %unity shows, a second output holds the operation's snapshot as plain HTML (see
// unity_nb/jupyter/_shown.py): what a notebook reopened without widget state shows, where JupyterLab cannot
// find the widget's model. While a view of the operation is rendered and live, that output is hidden; a dead
// widget (its kernel gone) lets the snapshot show again. Two ways, both added once per page:
// - in JupyterLab, Notebook 7 and the classic Notebook, one global rule hides the whole output (its prompt too);
// - anywhere else the two outputs share the page (VS Code's notebook webview, a Colab cell's output frame), the
//   snapshot names its operation (data-unb-for) and the live views hide it, and what holds nothing else around it
//   (the front end's wrapper of that output), wherever the front end puts it, also when it arrives or is replaced
//   after the view rendered (a mutation observer). The count of live views per operation is kept on the page
//   (globalThis), not in this module: a front end may load the module once per widget.
const SNAPSHOT_RULE_ID = "unity-nb-snapshot-beside";
if (typeof document !== "undefined" && !document.getElementById(SNAPSHOT_RULE_ID)) {
  const live = ":has(.unb-root:not(.unb-dead))";
  const rule = document.createElement("style");
  rule.id = SNAPSHOT_RULE_ID;
  rule.textContent = [
    `.jp-OutputArea-child${live} + .jp-OutputArea-child:has(.unity-nb-snapshot)`, // JupyterLab, Notebook 7
    `.output_area${live} + .output_area:has(.unity-nb-snapshot)`, // the classic Notebook
  ].map((selector) => `${selector} { display: none; }`).join("\n");
  document.head.append(rule);
}

const SNAPSHOT = ".unity-nb-snapshot[data-unb-for]";
const HIDDEN = "data-unb-hidden"; // on what a live view hid: the display it had
function snapshots() {
  let s = globalThis.__unityNbSnapshots;
  if (!s) {
    s = globalThis.__unityNbSnapshots = { live: new Map(), observer: null };
    if (typeof MutationObserver !== "undefined" && typeof document !== "undefined") {
      s.observer = new MutationObserver((records) => {
        const arrived = records.some((r) => [...r.addedNodes].some((n) => n.nodeType === 1 &&
          (n.matches(SNAPSHOT) || n.querySelector(SNAPSHOT))));
        if (arrived) placeSnapshots();
      });
      s.observer.observe(document.body, { childList: true, subtree: true });
    }
  }
  return s;
}
// the snapshot's output: it, or the nearest ancestor holding nothing else (never the page's body)
function outputOf(snap) {
  let box = snap;
  while (box.parentElement && box.parentElement !== document.body && box.parentElement.childElementCount === 1) {
    box = box.parentElement;
  }
  return box;
}
function placeSnapshots() {
  if (typeof document === "undefined") return;
  const live = snapshots().live;
  for (const snap of document.querySelectorAll(SNAPSHOT)) {
    const box = outputOf(snap);
    const hide = (live.get(snap.getAttribute("data-unb-for")) || 0) > 0;
    if (hide && !box.hasAttribute(HIDDEN)) {
      box.setAttribute(HIDDEN, box.style.display);
      box.style.display = "none";
    } else if (!hide && box.hasAttribute(HIDDEN)) {
      box.style.display = box.getAttribute(HIDDEN);
      box.removeAttribute(HIDDEN);
    }
  }
}
// a view of operation `id` is live (true) or no longer (false: dead, or taken out of the page)
function liveView(id, flag) {
  if (!id) return;
  const live = snapshots().live;
  live.set(id, Math.max(0, (live.get(id) || 0) + (flag ? 1 : -1)));
  placeSnapshots();
}
