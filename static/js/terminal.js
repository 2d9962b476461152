// A session's terminals on its page: xterm.js (static/vendor/terminal.js) over the
// terminal's WebSocket (sessions/terminal_consumer.py).
//
// The shell lives in the session's sandbox, not here: this page only shows it. At
// load it attaches from the start of what the sandbox still keeps, so a reload
// repaints the screen; if the socket drops (a network blip, daphne restarting) it
// attaches again from the last `end` it was given, and gets only what it missed.
(function () {
  "use strict";

  function bytes(b64) {
    const text = atob(b64);
    const out = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
    return out;
  }

  const CLOSED = {
    4403: "You may no longer use this session's terminal (its secrets need a grant you do not have).",
    4404: "This terminal is gone.",
  };

  function show(section, tab) {
    const screen = section.querySelector("[data-terminal-screen]");
    const status = section.querySelector("[data-terminal-status]");
    if (!screen || !window.BerthTerminal) return;
    for (const other of section.querySelectorAll("[data-terminal]")) {
      other.setAttribute("aria-selected", other === tab ? "true" : "false");
    }
    if (section.current) section.current.dispose();
    screen.replaceChildren();
    const url = new URL(location.href);
    url.searchParams.set("terminal", tab.dataset.terminal);
    history.replaceState(history.state, "", url);

    const term = new window.BerthTerminal.Terminal({
      cursorBlink: true,
      fontSize: 13,
      fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace",
      scrollback: 5000,
      theme: { background: "#0d1117" },
    });
    const fit = new window.BerthTerminal.FitAddon();
    term.loadAddon(fit);
    term.open(screen);
    let end = 0;
    let socket = null;
    let retry = 0;
    let done = false;

    function say(text, error) {
      if (!status) return;
      status.textContent = text || "";
      status.classList.toggle("error", Boolean(error));
    }
    function send(message) {
      if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
    }
    function connect() {
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      socket = new WebSocket(`${scheme}//${location.host}${tab.dataset.socket}?after=${end}`);
      socket.addEventListener("open", () => {
        retry = 0;
        send({ type: "resize", cols: term.cols, rows: term.rows });
      });
      socket.addEventListener("message", (event) => {
        const m = JSON.parse(event.data);
        if (m.type === "output") {
          term.write(bytes(m.data));
          end = m.end;
        } else if (m.type === "attached") {
          say("");
          if (m.start > m.after) term.write("\r\n\x1b[2m[berth] earlier output is no longer kept\x1b[0m\r\n");
        } else if (m.type === "error") {
          say(m.message, true);
        } else if (m.type === "ended") {
          done = true;
          term.options.disableStdin = true;
          const how = m.exit_code !== null && m.exit_code !== undefined ? ` (exit code ${m.exit_code})` : "";
          say(m.state === "exited" ? `The shell ended${how}.` : `The terminal is closed: ${m.reason}.`);
        }
      });
      socket.addEventListener("close", (event) => {
        if (done || section.current !== handle) return;
        if (CLOSED[event.code]) {
          say(CLOSED[event.code], true);
          return;
        }
        say("Reconnecting…");
        setTimeout(connect, Math.min(5000, 250 * 2 ** retry++));
      });
    }
    term.onData((data) => send({ type: "input", data }));
    term.onResize(({ cols, rows }) => send({ type: "resize", cols, rows }));
    const observer = new ResizeObserver(() => { try { fit.fit(); } catch (e) { /* hidden */ } });
    observer.observe(screen);
    fit.fit();
    const handle = {
      dispose() {
        observer.disconnect();
        if (socket) socket.close();
        term.dispose();
      },
    };
    section.current = handle;
    connect();
    term.focus();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const section = document.getElementById("terminals");
    if (!section) return;
    const tabs = [...section.querySelectorAll("[data-terminal]")];
    for (const tab of tabs) tab.addEventListener("click", () => show(section, tab));
    const chosen = tabs.find((t) => t.getAttribute("aria-selected") === "true") || tabs[tabs.length - 1];
    if (!chosen) return;
    show(section, chosen);
    // Asked for by name (a new terminal, a reload of one): it is what the page is for.
    if (new URL(location.href).searchParams.has("terminal")) section.scrollIntoView({ block: "start" });
  });
})();
