// The live log viewer of a run (run page and the workspace page's run dock).
//
// Markup: an element with `data-run-log` and `data-ws="/ws/runs/<id>/logs"` (or a
// session exec's, `/ws/execs/<id>/logs`: the same messages), holding `.log-lines`;
// optionally `data-status-url` (the run page: refresh `#run-status`, or the element
// `data-status-target` names, from it with htmx when the run starts and ends) and a
// `[data-run-badge]` nearby (the dock: set from the `end` message). The dock also has
// a clock (`[data-run-elapsed]`, ticking while active), a Cancel form
// (`[data-run-cancel]`) and the end's message (`[data-run-end]`). Log text only ever
// becomes text nodes.
(function () {
  "use strict";

  // The DOM keeps the newest lines only: a run may print millions, and a page holding
  // them all would freeze. The full log stays available through the API.
  const MAX_LINES = 20000; // VIEW_LINES in runner/views.py
  const ACTIVE = ["queued", "preparing", "running"];

  function styled(span) {
    const s = span.style;
    if (s.fg === null && s.bg === null && !s.bold && !s.dim && !s.italic && !s.underline) {
      return document.createTextNode(span.text);
    }
    const el = document.createElement("span");
    const classes = [];
    // Named colours get classes (the palette lives in CSS); 256 and true colours come
    // as "rgb(r, g, b)" built from numbers by ansi.js, set through the CSSOM.
    if (typeof s.fg === "number") classes.push(`ansi-fg-${s.fg}`);
    else if (s.fg) el.style.color = s.fg;
    if (typeof s.bg === "number") classes.push(`ansi-bg-${s.bg}`);
    else if (s.bg) el.style.backgroundColor = s.bg;
    if (s.bold) classes.push("ansi-bold");
    if (s.dim) classes.push("ansi-dim");
    if (s.italic) classes.push("ansi-italic");
    if (s.underline) classes.push("ansi-underline");
    el.className = classes.join(" ");
    el.textContent = span.text;
    return el;
  }

  // 42 s, 4 min 05 s, 1 h 02 min: as the run page's durations read.
  function clock(s) {
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
    return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
  }

  function mount(root) {
    if (root.berthViewer) return root.berthViewer;
    const scope = root.closest("[data-run]") || root;
    const lines = root.querySelector(".log-lines");
    const status = scope.querySelector("[data-log-status]");
    const badge = scope.querySelector("[data-run-badge]");
    const jump = root.querySelector("[data-log-jump]");
    const elapsed = scope.querySelector("[data-run-elapsed]");
    const cancel = scope.querySelector("[data-run-cancel]");
    const endNote = scope.querySelector("[data-run-end]");
    const styles = { stdout: null, stderr: null, system: null };
    // Paths in tracebacks link to the workspace's file (source_links.js), where known.
    const links = window.BerthSourceLinks;
    const sourceBase = links ? links.baseOf(root) : null;
    // A long log starts near its end (`data-after`, set by the page).
    let last = parseInt(root.dataset.after || "0", 10);
    let ended = false;
    let socket = null;
    let retry = 0;
    let follow = true;
    let trimmed = false;
    let sawOutput = false;

    function say(text, kind) {
      if (!status) return;
      status.textContent = text;
      status.dataset.kind = kind || "";
    }

    function atBottom() {
      return lines.scrollTop + lines.clientHeight >= lines.scrollHeight - 8;
    }

    // Scrolling up stops autoscroll; scrolling back to the bottom resumes it. Judged by
    // the direction, not by "at the bottom": lines appended between our own scroll and
    // its event would otherwise read as the user leaving the bottom.
    let lastTop = 0;
    lines.addEventListener("scroll", () => {
      if (lines.scrollTop < lastTop - 2 && !atBottom()) follow = false;
      else if (atBottom()) follow = true;
      lastTop = lines.scrollTop;
      if (jump && follow) jump.hidden = true;
    });
    if (jump) {
      jump.addEventListener("click", () => {
        follow = true;
        jump.hidden = true;
        lines.scrollTop = lines.scrollHeight;
      });
    }

    function append(entries) {
      const fragment = document.createDocumentFragment();
      for (const entry of entries) {
        if (entry.seq <= last) continue; // a replay after reconnecting overlaps
        last = entry.seq;
        const row = document.createElement("div");
        row.className = `line ${entry.stream}`;
        const parsed = window.BerthAnsi.parse(entry.text, styles[entry.stream]);
        styles[entry.stream] = parsed.style;
        for (const span of parsed.spans) row.appendChild(styled(span));
        if (!row.firstChild) row.appendChild(document.createTextNode("\u200b")); // keep blank lines' height
        else if (sourceBase && entry.stream !== "system") links.link(row, sourceBase);
        row.dataset.linked = "1";
        fragment.appendChild(row);
      }
      lines.appendChild(fragment);
      let extra = lines.childElementCount - MAX_LINES;
      if (extra > 0) {
        if (!trimmed) {
          trimmed = true;
          root.querySelector("[data-log-trimmed]")?.removeAttribute("hidden");
        }
        while (extra-- > 0) lines.firstElementChild.remove();
      }
      if (follow) lines.scrollTop = lines.scrollHeight;
      else if (jump) jump.hidden = false;
    }

    // One refresh at a time, each aimed at the element present when it starts: htmx
    // would queue a second request on the element the first one replaces, so the
    // run's end would land in a detached node and the page would stay "running".
    let refreshing = Promise.resolve();
    function refreshStatus() {
      const url = root.dataset.statusUrl;
      if (!url || !window.htmx) return;
      refreshing = refreshing.then(() => {
        const target = document.getElementById(root.dataset.statusTarget || "run-status");
        if (target) return window.htmx.ajax("GET", url, { target, swap: "outerHTML" });
      }).catch(() => {});
    }

    function setBadge(state) {
      if (!badge) return;
      badge.textContent = state.replace("_", " ");
      badge.className = `badge state-${state}`;
    }

    // The dock's clock: the server's count at render, carried on by this browser's.
    let ticking = null;
    if (elapsed && elapsed.hasAttribute("data-ticking")) {
      const base = parseInt(elapsed.dataset.elapsedS || "0", 10);
      const since = Date.now();
      const tick = () => { elapsed.textContent = clock(base + Math.floor((Date.now() - since) / 1000)); };
      tick();
      ticking = setInterval(() => { if (root.isConnected) tick(); else clearInterval(ticking); }, 1000);
    }

    function finished(message) {
      ended = true;
      const code = message.exit_code === null || message.exit_code === undefined ? "" : `, exit code ${message.exit_code}`;
      // An exec's end is "ended": its reason (exit_zero, killed, ...) says how. A run's
      // reason says why when the state alone does not (timeout, oom, cancelled_by_user).
      const how = message.state === "ended" && message.reason ? message.reason : message.state;
      const why = message.reason && message.state !== "ended" && !["exit_zero", "exit_nonzero"].includes(message.reason)
        ? ` (${message.reason.replaceAll("_", " ")})` : "";
      say(`Ended: ${how.replaceAll("_", " ")}${why}${code}.`, message.state);
      setBadge(message.state);
      if (ticking !== null) clearInterval(ticking);
      elapsed?.removeAttribute("data-ticking");
      cancel?.remove();
      if (endNote && message.message) {
        endNote.textContent = message.message;
        endNote.hidden = false;
      }
      refreshStatus();
    }

    function connect() {
      if (!root.isConnected) return; // the dock replaced this run with a newer one
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      socket = new WebSocket(`${scheme}//${location.host}${root.dataset.ws}?after=${last}`);
      socket.addEventListener("open", () => {
        retry = 0;
        say("Live", "live");
      });
      socket.addEventListener("message", (event) => {
        if (event.target !== socket) return; // one replaced by recheck()
        const message = JSON.parse(event.data);
        if (message.type === "entries") {
          append(message.entries);
          if (!sawOutput) {
            sawOutput = true;
            // The sandbox now exists: isolation and timings have something to show.
            const current = document.getElementById("run-status");
            if (current && ["queued", "preparing"].includes(current.dataset.state)) refreshStatus();
            setBadge("running");
          }
        } else if (message.type === "end") {
          finished(message);
        }
      });
      socket.addEventListener("close", (event) => {
        if (ended || event.target !== socket || !root.isConnected) return;
        if (event.code >= 4000 && event.code < 5000) {
          // The door refused (4404: gone, or no longer ours); retrying cannot help.
          say(event.code === 4404 ? "This run's log is not available to you." : `The log was refused (${event.code - 4000}).`, "error");
          return;
        }
        // Dropped (server restart, network): resume after the last entry shown.
        const wait = Math.min(15000, 500 * 2 ** retry++);
        say(`Disconnected; reconnecting in ${Math.round(wait / 1000)} s…`, "error");
        setTimeout(connect, wait);
      });
    }

    // A swapped-in status that is already terminal (e.g. after Cancel on a queued run)
    // may come with no log signal; a fresh socket replays what is left, then `end`.
    function recheck(state) {
      if (ended || ACTIVE.includes(state) || !socket) return;
      const old = socket;
      socket = null;
      old.close();
      connect();
    }

    function stop() {
      const old = socket;
      socket = null;
      ended = true;
      if (old) old.close();
    }

    // The dock's Cancel is the run page's (same door, same check); a run ended at once
    // (queued or preparing) may send no log signal, so the socket is opened again.
    cancel?.addEventListener("htmx:afterRequest", (event) => {
      if (event.detail.successful) recheck("cancelled");
    });

    say("Connecting…");
    connect();
    root.berthViewer = { recheck, stop };
    return root.berthViewer;
  }

  function mountAll(scope) {
    if (!window.BerthAnsi) return;
    (scope || document).querySelectorAll("[data-run-log]").forEach(mount);
  }

  window.BerthRunLog = { mount };
  document.addEventListener("DOMContentLoaded", () => mountAll(document));
  // htmx swaps: a run started from the dock brings its viewer; a refreshed status may
  // show the run ended.
  document.addEventListener("htmx:load", (event) => {
    mountAll(document);
    const status = event.detail.elt.id === "run-status" ? event.detail.elt : null;
    if (status) {
      document.querySelectorAll("[data-run-log]").forEach((el) => {
        if (el.berthViewer) el.berthViewer.recheck(status.dataset.state);
      });
    }
  });

  // The dock: a new run replaces the one shown, whose socket must not linger.
  document.addEventListener("htmx:beforeSwap", (event) => {
    if (event.detail.target.id !== "run-dock-body") return;
    event.detail.target.querySelectorAll("[data-run-log]").forEach((el) => el.berthViewer?.stop());
  });
  // Show the output area when a run starts there; the toggle hides it again.
  document.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail.target.id !== "run-dock-body") return;
    event.detail.target.hidden = false;
    const toggle = document.querySelector("[data-dock-toggle]");
    if (toggle) {
      toggle.hidden = false;
      toggle.setAttribute("aria-expanded", "true");
      toggle.textContent = "Hide output";
    }
  });
  document.addEventListener("click", (event) => {
    const toggle = event.target.closest("[data-dock-toggle]");
    if (!toggle) return;
    const body = document.getElementById(toggle.getAttribute("aria-controls"));
    body.hidden = !body.hidden;
    toggle.setAttribute("aria-expanded", String(!body.hidden));
    toggle.textContent = body.hidden ? "Show output" : "Hide output";
  });
})();
