// Terminals: xterm.js (static/vendor/terminal.js) over a terminal's WebSocket
// (sessions/terminal_consumer.py), on the session page and in the workspace page's
// side pane (static/js/panes.js), through `window.BerthTerminalView.mount`.
//
// The shell lives in the session's sandbox, not here: this page only shows it. At
// mount it attaches from the start of what the sandbox still keeps, so a reload
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

  // The terminal's colours are the log views' (static/css/runs.css: --log-*, --ansi-*),
  // read from the page's CSS so one palette, at AA contrast on its background, serves
  // both; read again when the system's colour scheme changes.
  const ANSI = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"];
  function themeOf(element) {
    const css = getComputedStyle(element);
    const get = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
    const theme = {
      background: get("--log-bg", "#0f1419"),
      foreground: get("--log-fg", "#d6dde6"),
      cursor: get("--log-fg", "#d6dde6"),
      selectionBackground: "#264f78",
    };
    ANSI.forEach((name, i) => {
      theme[name] = get(`--ansi-${i}`, undefined);
      theme["bright" + name[0].toUpperCase() + name.slice(1)] = get(`--ansi-${i + 8}`, undefined);
    });
    return theme;
  }
  const darkQuery = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

  // A terminal drawn in `screen`, talking on `socketPath`; what it has to say about
  // its connection goes to `status`. Returns {dispose()}.
  function mount(screen, socketPath, status) {
    screen.replaceChildren();
    const term = new window.BerthTerminal.Terminal({
      cursorBlink: true,
      fontSize: 13,
      fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace",
      scrollback: 5000,
      theme: themeOf(screen),
    });
    const onScheme = () => { term.options.theme = themeOf(screen); };
    if (darkQuery) darkQuery.addEventListener("change", onScheme);
    const fit = new window.BerthTerminal.FitAddon();
    term.loadAddon(fit);
    term.open(screen);
    let end = 0;
    let socket = null;
    let retry = 0;
    let done = false;
    let disposed = false;

    function say(text, error) {
      if (!status) return;
      status.textContent = text || "";
      status.classList.toggle("error", Boolean(error));
    }
    // Keystrokes typed while the socket (re)connects wait for it, a screenful at most.
    const waiting = [];
    function send(message) {
      if (socket && socket.readyState === WebSocket.OPEN) {
        socket.send(JSON.stringify(message));
      } else if (message.type === "input" && waiting.length < 4096) {
        waiting.push(message);
      }
    }
    function connect() {
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      socket = new WebSocket(`${scheme}//${location.host}${socketPath}?after=${end}`);
      socket.addEventListener("open", () => {
        retry = 0;
        send({ type: "resize", cols: term.cols, rows: term.rows });
        for (const message of waiting.splice(0)) send(message);
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
        if (done || disposed) return;
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
    connect();
    term.focus();
    return {
      dispose() {
        disposed = true;
        observer.disconnect();
        if (darkQuery) darkQuery.removeEventListener("change", onScheme);
        if (socket) socket.close();
        term.dispose();
      },
    };
  }

  window.BerthTerminalView = { mount };

  // The session page: its tabs, one terminal shown at a time.
  function show(section, tab) {
    const screen = section.querySelector("[data-terminal-screen]");
    if (!screen || !window.BerthTerminal) return;
    for (const other of section.querySelectorAll("[data-terminal]")) {
      other.setAttribute("aria-selected", other === tab ? "true" : "false");
    }
    if (section.current) section.current.dispose();
    const url = new URL(location.href);
    url.searchParams.set("terminal", tab.dataset.terminal);
    history.replaceState(history.state, "", url);
    section.current = mount(screen, tab.dataset.socket, section.querySelector("[data-terminal-status]"));
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
