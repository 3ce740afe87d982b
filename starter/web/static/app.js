// The inbox and run pages, live without reload (the runs page is plain HTML and links). Everything comes from this server: the inbox
// list from its shared poll, a run's events and text from its one shared stream subscription.
(function () {
  "use strict";
  const body = document.body;
  const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";

  function show(kind, text) {
    showAll(kind, text ? [text] : []);
  }

  // One line each (a batch says what happened to every call).
  function showAll(kind, lines) {
    const box = document.getElementById(kind === "alert" ? "alerts" : "notes");
    if (!box) return;
    box.replaceChildren();
    lines.forEach(function (text) {
      const p = document.createElement("p");
      if (kind === "alert") p.setAttribute("role", "alert");
      p.className = kind === "alert" ? "refusal" : "note";
      p.textContent = text;
      box.appendChild(p);
    });
  }

  async function send(url, payload) {
    const response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json", "x-csrf-token": csrf },
      body: JSON.stringify(payload),
    });
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    return { ok: response.ok, status: response.status, data: data,
             location: response.headers.get("location") };
  }

  function failure(result) {
    return (result.data && result.data.error) || ("request failed (" + result.status + ")");
  }

  // A refusal shows beside the card that was answered, naming the run (one refusal at a time,
  // unless a batch had several); without a card, at the top of the page.
  function clearRefusals() {
    document.querySelectorAll("[data-refusal]").forEach(function (el) { el.remove(); });
    show("alert", "");
  }

  function refuse(card, text, keep) {
    if (!keep) clearRefusals();
    if (!card) { show("alert", text); return; }
    const p = document.createElement("p");
    p.setAttribute("role", "alert");
    p.setAttribute("data-refusal", "");
    p.className = "refusal";
    p.textContent = text;
    card.appendChild(p);
    if (p.scrollIntoView) p.scrollIntoView({ block: "nearest" });
  }

  // What a card's refusal names: its run, and its call (none for a budget card).
  function cardName(card, callId) {
    const run = card ? card.getAttribute("data-workflow-id") : "";
    return [run, callId].filter(function (part) { return part; }).join(" ");
  }

  // A call is the same call only in the same run with the same arguments: when another run
  // took the workflow id, or the arguments changed, its element is replaced, never kept.
  // A workflow id as one path segment (as the server's `segment`): an id of dots only too.
  function segment(id) {
    const encoded = encodeURIComponent(id);
    return /^\.+$/.test(encoded) ? encoded.replace(/\./g, "%2E") : encoded;
  }

  function keyOf(el) {
    return ["data-workflow-id", "data-call-id", "data-run-id", "data-arguments-sha256", "data-budget", "data-expired"]
      .map(function (name) { return el.getAttribute(name) || ""; }).join("\u0000");
  }

  // A call's card, or a run's budget card: kept while it stays (with what a person typed).
  function keyed(el) {
    return el.hasAttribute("data-call-id") || el.hasAttribute("data-budget");
  }

  // A kept card takes the new version of its parts (who approved so far, who may answer, the
  // buttons when that changed), keeping what a person typed where nothing changed.
  function refreshParts(kept, fresh) {
    if (kept === fresh) return;
    fresh.querySelectorAll("[data-part]").forEach(function (part) {
      const old = kept.querySelector('[data-part="' + part.getAttribute("data-part") + '"]');
      if (old && !old.isEqualNode(part)) old.replaceWith(part.cloneNode(true));
    });
    ["data-who-may", "data-may-answer"].forEach(function (name) {
      if (fresh.hasAttribute(name)) kept.setAttribute(name, fresh.getAttribute(name));
    });
  }

  // Replace the calls in `container` by those of `html`, keeping the elements that stay (and
  // what a person typed into them).
  function mergeCalls(container, html) {
    const template = document.createElement("template");
    template.innerHTML = html;
    const current = new Map();
    container.querySelectorAll("[data-call-id], [data-budget]").forEach(function (el) { current.set(keyOf(el), el); });
    const wanted = [];
    Array.from(template.content.children).forEach(function (el) {
      if (keyed(el)) {
        const kept = current.get(keyOf(el));
        if (kept) refreshParts(kept, el);
        wanted.push(kept || el);
      } else {
        wanted.push(el);
      }
    });
    const now = Array.from(container.children);
    const same = now.length === wanted.length && now.every(function (el, i) {
      return el === wanted[i] || (!keyed(el) && el.isEqualNode(wanted[i]));
    });
    if (!same) container.replaceChildren.apply(container, wanted);
    tick();
  }

  function age(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    const d = Math.floor(seconds / 86400), h = Math.floor(seconds % 86400 / 3600);
    const m = Math.floor(seconds % 3600 / 60), s = seconds % 60;
    if (d) return d + "d " + h + "h";
    if (h) return h + "h " + m + "m";
    if (m) return m + "m " + s + "s";
    return s + "s";
  }

  function tick() {
    document.querySelectorAll("[data-waiting-since]").forEach(function (el) {
      const since = Date.parse(el.getAttribute("data-waiting-since"));
      if (!isNaN(since)) el.textContent = age((Date.now() - since) / 1000);
    });
  }

  let refreshNow = function () {};

  document.addEventListener("submit", async function (event) {
    const form = event.target;
    const kind = form.getAttribute("data-form");
    if (!kind) return;
    event.preventDefault();
    const buttons = form.querySelectorAll("button");
    buttons.forEach(function (b) { b.disabled = true; });
    try {
      if (kind === "answer") await answer(form, event.submitter);
      else if (kind === "question") await answerQuestion(form);
      else if (kind === "start") await start(form);
      else if (kind === "reask") await reask(form);
      else if (kind === "cancel") await cancelRun(form);
      else if (kind === "message") await message(form);
      else if (kind === "grant") await grant(form, event.submitter);
      else if (kind === "fork") await forkRun(form);
    } catch (err) {
      show("alert", "request failed: " + err);
    } finally {
      buttons.forEach(function (b) { b.disabled = false; });
    }
  });

  // The answer a card's form gives: for the call that was shown (its run and a digest of its
  // arguments), with the reason, the edited arguments and "remember" as the person set them.
  function answerOf(form, approved) {
    const payload = { call_id: form.elements["call_id"].value, approved: approved };
    if (form.elements["run_id"].value) payload.run_id = form.elements["run_id"].value;
    payload.arguments_sha256 = form.elements["arguments_sha256"].value;
    const reason = form.elements["reason"].value.trim();
    if (reason) payload.reason = reason;
    const args = form.elements["arguments"];
    // Edited arguments replace the model's only when the call runs (an approval). A call under
    // an approver rule has neither field: it takes neither an edit nor `remember`.
    if (approved && args && args.value !== args.defaultValue) payload.arguments = args.value;
    const remember = form.elements["remember"];
    if (remember && remember.checked) payload.remember = true;
    return payload;
  }

  async function answer(form, submitter) {
    const approved = !!submitter && submitter.value === "true";
    const callId = form.elements["call_id"].value;
    const item = form.closest("[data-call-id]");
    const result = await send(form.getAttribute("data-api"), answerOf(form, approved));
    if (!result.ok) {
      refuse(item, cardName(item, callId) + ": " + failure(result));
      return;
    }
    clearRefusals();
    if (item) item.remove();
    const still = ((result.data && result.data.pending) || []).some(function (c) { return c.id === callId; });
    // Under an approver rule an approval is one vote: the call waits for the others.
    show("note", callId + (still ? ": approval counted, waiting for more approvers" : approved ? " approved" : " rejected"));
    refreshNow();
  }

  // A question's answer: the text typed, the option chosen (radio buttons), or the options
  // chosen (checkboxes, for a question that takes several).
  async function answerQuestion(form) {
    const callId = form.elements["call_id"].value;
    const inputs = Array.from(form.querySelectorAll('input[name="answer"]'));
    const item = form.closest("[data-call-id]");
    const named = cardName(item, callId);
    let given;
    if (inputs.length && inputs[0].type === "checkbox") {
      given = inputs.filter(function (i) { return i.checked; }).map(function (i) { return i.value; });
      if (!given.length) { refuse(item, named + ": choose at least one answer"); return; }
    } else if (inputs.length && inputs[0].type === "radio") {
      const chosen = inputs.find(function (i) { return i.checked; });
      if (!chosen) { refuse(item, named + ": choose an answer"); return; }
      given = chosen.value;
    } else {
      given = form.elements["answer"].value;
    }
    const payload = { call_id: callId, answer: given };
    if (form.elements["run_id"].value) payload.run_id = form.elements["run_id"].value;
    const result = await send(form.getAttribute("data-api"), payload);
    if (!result.ok) {
      refuse(item, named + ": " + failure(result));
      return;
    }
    clearRefusals();
    if (item) item.remove();
    show("note", callId + " answered");
    refreshNow();
  }

  // `Approve selected` / `Reject selected`: each selected call gets its own answer, the same
  // request its card's button sends; one refused says why and the others still go.
  async function answerSelected(approved) {
    const cards = Array.from(document.querySelectorAll("[data-call-id]")).filter(function (card) {
      const box = card.querySelector("input[data-select]");
      return box && box.checked && card.querySelector('form[data-form="answer"]');
    });
    if (!cards.length) { show("alert", "select one or more calls first"); return; }
    const outcomes = await Promise.all(cards.map(async function (card) {
      const form = card.querySelector('form[data-form="answer"]');
      try {
        return { card: card, result: await send(form.getAttribute("data-api"), answerOf(form, approved)) };
      } catch (err) {
        return { card: card, result: { ok: false, status: 0, data: { error: "request failed: " + err } } };
      }
    }));
    const answered = [];
    clearRefusals();
    outcomes.forEach(function (o) {
      const which = o.card.getAttribute("data-workflow-id") + " " + o.card.getAttribute("data-call-id");
      if (o.result.ok) {
        o.card.remove();
        answered.push(which + (approved ? " approved" : " rejected"));
      } else {
        refuse(o.card, which + ": " + failure(o.result), true);
      }
    });
    showAll("note", answered);
    refreshNow();
  }

  document.addEventListener("click", async function (event) {
    const button = event.target.closest ? event.target.closest("button[data-batch]") : null;
    if (!button) return;
    const buttons = document.querySelectorAll("button[data-batch]");
    buttons.forEach(function (b) { b.disabled = true; });
    try {
      await answerSelected(button.getAttribute("data-batch") === "approve");
    } catch (err) {
      show("alert", "request failed: " + err);
    } finally {
      buttons.forEach(function (b) { b.disabled = false; });
    }
  });

  // More tokens for a run at its budget, or stop it: the server adds who grants.
  async function grant(form, submitter) {
    const stop = !!submitter && submitter.value === "stop";
    const card = form.closest("[data-budget]");
    const id = card ? card.getAttribute("data-workflow-id") : "";
    let payload = { stop: true };
    if (!stop) {
      const given = form.elements["tokens"].value.trim();
      payload = { tokens: /^[0-9]+$/.test(given) ? parseInt(given, 10) : given };
    }
    const result = await send(form.getAttribute("data-api"), payload);
    if (!result.ok) {
      refuse(card, id + ": " + failure(result));
      return;
    }
    clearRefusals();
    if (card) card.remove();
    show("note", id + (stop ? ": stopped at its budget" : ": granted " + payload.tokens + " tokens"));
    refreshNow();
  }

  // An expired call asked again: it waits with a new deadline (the card comes back as waiting).
  async function reask(form) {
    const callId = form.elements["call_id"].value;
    const item = form.closest("[data-call-id]");
    const result = await send(form.getAttribute("data-api"), { call_id: callId });
    if (!result.ok) {
      refuse(item, cardName(item, callId) + ": " + failure(result));
      return;
    }
    clearRefusals();
    show("note", callId + " asked again");
    refreshNow();
  }

  async function start(form) {
    const payload = { prompt: form.elements["prompt"].value };
    const system = form.elements["system"].value;
    if (system.trim()) payload.system = system;
    const result = await send("/api/runs", payload);
    if (!result.ok) { show("alert", failure(result)); return; }
    window.location.assign(result.location);
  }

  // A new run from this conversation up to the end of the form's round: its page opens.
  async function forkRun(form) {
    const result = await send(form.getAttribute("data-api"), { round: parseInt(form.getAttribute("data-round"), 10) });
    if (!result.ok) { show("alert", failure(result)); return; }
    window.location.assign(result.location);
  }

  async function cancelRun(form) {
    const result = await send(form.getAttribute("data-api"), { immediate: true });
    if (!result.ok) { show("alert", failure(result)); return; }
    show("note", "cancel requested");
    refreshNow();
  }

  async function message(form) {
    const field = form.elements["content"];
    const result = await send(form.getAttribute("data-api"), { content: field.value });
    if (!result.ok) { show("alert", failure(result)); return; }
    field.value = "";
    show("note", "message sent");
  }

  function loop(step, every) {
    let timer = null;
    let running = false;
    async function go() {
      clearTimeout(timer);
      if (running) return;
      running = true;
      let again = true;
      try { again = await step(); } catch (e) { again = true; }
      running = false;
      if (again !== false) timer = setTimeout(go, every);
    }
    refreshNow = go;
    go();
  }

  function inboxPage() {
    let version = body.getAttribute("data-version");
    const calls = document.getElementById("calls");
    const problem = document.getElementById("poll-error");
    loop(async function () {
      const response = await fetch("/inbox/live?v=" + encodeURIComponent(version), { credentials: "same-origin" });
      if (!response.ok) return true;
      const data = await response.json();
      problem.textContent = data.error || "";
      if (data.html !== null) {
        version = String(data.version);
        mergeCalls(calls, data.html);
      }
      return true;
    }, 700);
  }

  function runPage() {
    const id = body.getAttribute("data-run");
    let version = body.getAttribute("data-version");
    let after = parseInt(body.getAttribute("data-after"), 10);
    let piece = parseInt(body.getAttribute("data-piece"), 10);
    const events = document.getElementById("events");
    const liveText = document.getElementById("live-text");
    loop(async function () {
      const url = "/runs/" + segment(id) + "/live?after=" + after + "&piece=" + piece + "&v=" + encodeURIComponent(version);
      const response = await fetch(url, { credentials: "same-origin" });
      if (!response.ok) return true;
      const data = await response.json();
      data.pieces.forEach(function (p) {
        if (p.restart) liveText.textContent = "";
        liveText.textContent += p.text;
      });
      piece = data.next_piece;
      data.events.forEach(function (e) {
        const li = document.createElement("li");
        li.setAttribute("data-seq", e.seq);
        const seq = document.createElement("span");
        seq.className = "seq";
        seq.textContent = e.seq;
        li.appendChild(seq);
        li.appendChild(document.createTextNode(" " + e.line));
        events.appendChild(li);
        after = e.seq;
        if (e.type === "text_delta") liveText.textContent = "";
      });
      if (data.ended) {
        // A run that is over takes no cancel and no message: its controls go.
        const controls = document.querySelector("section.controls");
        if (controls) controls.remove();
      }
      if (data.parts) {
        version = String(data.version);
        document.getElementById("phase").innerHTML = data.parts.phase;
        document.getElementById("conversation").innerHTML = data.parts.conversation;
        document.getElementById("audit").innerHTML = data.parts.audit;
        mergeCalls(document.getElementById("calls"), data.parts.calls);
      }
      return !data.done;
    }, 400);
  }

  setInterval(tick, 1000);
  tick();
  if (body.getAttribute("data-page") === "inbox") inboxPage();
  if (body.getAttribute("data-page") === "run") runPage();
})();
