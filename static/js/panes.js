// The workspace page's side pane: a preview (its frame, address bar and log) or the
// branch's terminal beside the code, in a split whose width is dragged (or set with
// the arrow keys on the splitter) and remembered in this browser, per workspace, with
// what was open, so a reload comes back to the same layout.
(function () {
  "use strict";

  const MIN = 280; // px, each side of the split
  const STEP = 40; // px per arrow key

  function load(key) {
    try { return JSON.parse(localStorage.getItem(key) || "{}"); } catch (e) { return {}; }
  }
  function save(key, value) {
    try { localStorage.setItem(key, JSON.stringify(value)); } catch (e) { /* private mode */ }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const side = document.getElementById("side-pane");
    if (!side) return;
    const body = side.querySelector("[data-side-body]");
    const status = side.querySelector("[data-side-status]");
    const pageLink = side.querySelector("[data-side-page]");
    const splitter = document.querySelector(".splitter[aria-controls=side-pane]");
    const grid = side.parentElement;
    const key = side.dataset.panesKey;
    const state = load(key);
    let shown = null; // {dispose()} of what the body holds

    function width(px) {
      const room = grid.clientWidth - (grid.firstElementChild?.offsetWidth || 0) - MIN;
      const w = Math.max(MIN, Math.min(px, Math.max(MIN, room)));
      grid.style.setProperty("--side-width", `${w}px`);
      splitter.setAttribute("aria-valuenow", String(Math.round(w)));
      splitter.setAttribute("aria-valuemin", String(MIN));
      splitter.setAttribute("aria-valuemax", String(Math.max(MIN, room)));
      return w;
    }
    function remember(patch) {
      Object.assign(state, patch);
      save(key, state);
    }
    function select(tab) {
      for (const t of side.querySelectorAll("[role=tab]")) t.setAttribute("aria-selected", String(t === tab));
    }
    function clear() {
      if (shown) shown.dispose();
      shown = null;
      body.querySelectorAll("[data-run-log]").forEach((el) => el.berthViewer?.stop());
      body.replaceChildren();
      status.textContent = "";
      pageLink.hidden = true;
    }
    function open() {
      side.hidden = false;
      splitter.hidden = false;
      grid.classList.add("with-side");
      width(state.width || Math.round(grid.clientWidth * 0.4));
    }
    function close() {
      clear();
      side.hidden = true;
      splitter.hidden = true;
      grid.classList.remove("with-side");
      remember({ open: null });
    }

    function showPreview(id) {
      const tab = side.querySelector(`[data-side-preview="${id}"]`);
      if (!tab) return false;
      clear();
      open();
      select(tab);
      remember({ open: { preview: id } });
      window.htmx.ajax("GET", tab.dataset.paneUrl, { target: body, swap: "innerHTML" });
      return true;
    }

    async function showTerminal(existing) {
      const tab = side.querySelector("[data-side-terminal]");
      if (!tab) return;
      clear();
      open();
      select(tab);
      let term = existing;
      if (!term) {
        status.textContent = "Opening a terminal in this branch's session…";
        const form = new FormData();
        form.set("ref", side.dataset.ref);
        form.set("csrfmiddlewaretoken", document.querySelector("[name=csrfmiddlewaretoken]")?.value || "");
        const answer = await fetch(side.dataset.terminalUrl, {
          method: "POST",
          body: form,
          headers: { Accept: "application/json" },
        });
        const said = await answer.json();
        if (!answer.ok) {
          status.textContent = said.error?.message || "No terminal.";
          status.classList.add("error");
          return;
        }
        term = said;
      }
      remember({ open: { terminal: term }, terminal: term });
      const screen = document.createElement("div");
      screen.className = "terminal-screen side-terminal";
      screen.id = "side-terminal";
      body.replaceChildren(screen);
      pageLink.href = term.page;
      pageLink.hidden = false;
      status.textContent = "";
      shown = window.BerthTerminalView.mount(screen, term.socket, status);
    }

    side.addEventListener("click", (event) => {
      const preview = event.target.closest("[data-side-preview]");
      if (preview) showPreview(preview.dataset.sidePreview);
      if (event.target.closest("[data-side-terminal]")) {
        // The terminal last shown here (its shell lives on), else a new one (the
        // branch's session opens for it). The header's Terminal button opens a new one.
        showTerminal(state.terminal || null);
      }
      if (event.target.closest("[data-side-close]")) close();
    });
    document.addEventListener("click", (event) => {
      const link = event.target.closest("[data-open-side-preview]");
      if (link && showPreview(link.dataset.openSidePreview)) event.preventDefault();
    });
    // The pane's Restart and Stop act in place: the preview page would replace this one
    // (the state socket brings the pane their outcome).
    side.addEventListener("submit", (event) => {
      const form = event.target.closest("#preview-status form");
      if (!form) return;
      event.preventDefault();
      const url = side.querySelector("[data-preview-pane]")?.dataset.statusUrl;
      fetch(form.action, { method: "POST", body: new FormData(form), redirect: "manual" })
        .then(() => url && window.BerthLiveState.refresh(url, "preview-status"));
    });
    // The header's Terminal button opens it here rather than on the session's page.
    document.querySelector(".ws-terminal")?.addEventListener("submit", (event) => {
      event.preventDefault();
      showTerminal(null);
    });

    // The splitter: dragged with a pointer, or moved with the arrow keys.
    splitter.addEventListener("pointerdown", (event) => {
      splitter.setPointerCapture(event.pointerId);
      const right = grid.getBoundingClientRect().right;
      const move = (e) => { remember({ width: width(right - e.clientX) }); };
      const up = () => {
        splitter.removeEventListener("pointermove", move);
        splitter.removeEventListener("pointerup", up);
      };
      splitter.addEventListener("pointermove", move);
      splitter.addEventListener("pointerup", up);
    });
    splitter.addEventListener("keydown", (event) => {
      const now = Number(splitter.getAttribute("aria-valuenow")) || MIN;
      const by = { ArrowLeft: STEP, ArrowRight: -STEP }[event.key];
      if (by === undefined) return;
      event.preventDefault();
      remember({ width: width(now + by) });
    });

    // A preview's address bar: what the gateway saw this viewer's frame navigate to
    // (Berth's page cannot read a cross-origin frame's location), and a way to go
    // somewhere, or to load the same address again.
    function address(form) {
      const input = form.querySelector("input[name=path]");
      const frame = form.parentElement.querySelector("iframe");
      const tabLink = form.querySelector("[data-address-tab]");
      const go = (path) => {
        const next = path.startsWith("/") ? path : `/${path}`;
        const url = `${form.dataset.openUrl}?next=${encodeURIComponent(next)}`;
        frame.src = url;
        tabLink.href = url;
      };
      form.addEventListener("submit", (event) => { event.preventDefault(); go(input.value || "/"); });
      form.querySelector("[data-address-reload]").addEventListener("click", () => go(input.value || "/"));
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      let socket = null;
      let closed = false;
      let retry = 0;
      function connect() {
        socket = new WebSocket(`${scheme}//${location.host}${form.dataset.navWs}`);
        socket.addEventListener("open", () => { retry = 0; });
        socket.addEventListener("message", (event) => {
          const m = JSON.parse(event.data);
          if (m.type !== "navigated") return;
          if (document.activeElement !== input) input.value = m.path;
          tabLink.href = `${form.dataset.openUrl}?next=${encodeURIComponent(m.path)}`;
        });
        socket.addEventListener("close", (event) => {
          if (closed || (event.code >= 4000 && event.code < 5000)) return;
          setTimeout(connect, Math.min(10000, 500 * 2 ** retry++));
        });
      }
      connect();
      return {
        reload() { go(input.value || "/"); },
        dispose() { closed = true; socket?.close(); },
      };
    }

    // The preview's moves, as its state socket says them: the status is asked for
    // again; a crash (or a failure, a stop) loads the frame again, where the gateway
    // answers with its notice, the last lines of the log and a restart; once ready
    // again (a new process), the frame loads the app and the log follows the new one.
    const ENDED = ["failed", "stopped", "crashed"];
    function watchPreview(pane, bar) {
      let shown = null; // the last {state, run} acted on
      const watcher = window.BerthLiveState.watch(pane.dataset.stateWs, (m) => {
        const status = side.querySelector("#preview-status");
        if (!status || status.dataset.state !== m.state) {
          window.BerthLiveState.refresh(pane.dataset.statusUrl, "preview-status");
        }
        if (shown !== null) {
          const ended = ENDED.includes(m.state) && !ENDED.includes(shown.state);
          const back = m.state === "ready" && (shown.state !== "ready" || shown.run !== m.run);
          if (ended || back) bar.reload();
          if (m.run && m.run !== shown.run) newLog(pane);
        }
        shown = { state: m.state, run: m.run };
      });
      return {
        dispose() { watcher.dispose(); bar.dispose(); },
      };
    }
    function newLog(pane) {
      const old = pane.querySelector("[data-run-log]");
      if (!old) return;
      old.berthViewer?.stop();
      const fresh = old.cloneNode(true);
      fresh.dataset.after = "0";
      fresh.querySelector(".log-lines").replaceChildren();
      old.replaceWith(fresh);
      window.BerthRunLog?.mount(fresh);
    }
    document.addEventListener("htmx:load", (event) => {
      const elt = event.detail.elt;
      const form = elt.matches?.("[data-preview-address]") ? elt : elt.querySelector?.("[data-preview-address]");
      if (form && side.contains(form) && !form.berthAddress) {
        form.berthAddress = address(form);
        const pane = form.closest("[data-preview-pane]");
        shown = pane ? watchPreview(pane, form.berthAddress) : form.berthAddress;
      }
    });

    // Back to what was open before a reload.
    const was = state.open;
    if (was?.preview) showPreview(was.preview);
    else if (was?.terminal) showTerminal(was.terminal);
  });
})();
