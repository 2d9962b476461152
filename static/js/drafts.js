// Unsaved editor text kept in this browser, and the tabs of open files.
//
// A draft is kept per workspace, branch and path, with the commit and blob its text was
// opened from (its base): reopened, it comes back as it was, and a save from it is
// merged by the server with whatever the branch got since that base. Nothing leaves the
// browser until a save; a save or a discard removes it.
(function () {
  "use strict";
  const PREFIX = "berth.draft:";

  function key(workspace, branch, path) {
    return PREFIX + JSON.stringify([workspace, branch, path]);
  }
  function get(workspace, branch, path) {
    try {
      const draft = JSON.parse(localStorage.getItem(key(workspace, branch, path)) || "null");
      return draft && typeof draft.text === "string" ? draft : null;
    } catch {
      return null;
    }
  }
  // Whether it is kept: false in private modes and past the storage quota, where the
  // page still warns before leaving.
  function put(workspace, branch, path, draft) {
    try {
      localStorage.setItem(key(workspace, branch, path), JSON.stringify(draft));
      return true;
    } catch {
      return false;
    }
  }
  function drop(workspace, branch, path) {
    try { localStorage.removeItem(key(workspace, branch, path)); } catch { /* private mode */ }
  }
  window.BerthDrafts = { get, put, drop, has: (w, b, p) => get(w, b, p) !== null };
})();

// Tabs of the files opened in this browser tab (per workspace and ref): each a link that
// opens the file, the current one marked, with a button that closes it. A tab says when
// its file has unsaved text, when it went from the branch (renamed or deleted: closed
// with a word why, or kept and marked while it holds unsaved text), and what a session
// on the branch did to it (session_marks.js).
(function () {
  "use strict";
  const bar = document.querySelector(".file-tabs[data-tabs-key]");
  if (!bar) return;
  const key = bar.dataset.tabsKey;
  const current = bar.dataset.current;
  const workspace = bar.dataset.workspace;
  const branch = bar.dataset.branch;
  const news = document.getElementById("tab-news");
  const MAX = 12;
  const marks = new Map(); // path → {gone: text, session: "changed"|"conflict", ...}

  function load() {
    try { return JSON.parse(sessionStorage.getItem(key) || "[]"); } catch { return []; }
  }
  function store(paths) {
    try { sessionStorage.setItem(key, JSON.stringify(paths)); } catch { /* private mode */ }
  }
  function unsaved(path) {
    return !!branch && window.BerthDrafts.has(workspace, branch, path);
  }
  let paths = load();
  // A missing file keeps its tab only while it holds unsaved text (to show it).
  const opened = current && (bar.dataset.exists || unsaved(current));
  if (opened && !paths.includes(current)) paths = [...paths, current].slice(-MAX);
  store(paths);

  // Each closing said, until the person has read them (OK).
  function tell(text) {
    if (!news) return;
    if (news.hidden) news.replaceChildren();
    news.querySelector("button")?.remove();
    const line = document.createElement("span");
    line.className = "tab-news-line";
    line.textContent = text;
    const dismiss = document.createElement("button");
    dismiss.type = "button";
    dismiss.className = "small ghost";
    dismiss.textContent = "OK";
    dismiss.addEventListener("click", () => { news.hidden = true; });
    news.append(line, dismiss);
    news.hidden = false;
  }

  function close(path) {
    if (unsaved(path) && !confirm(`Discard your unsaved text of ${path}? It is kept in this browser until you do.`)) return;
    if (path === current && window.BerthPage) window.BerthPage.discard();
    if (branch) window.BerthDrafts.drop(workspace, branch, path);
    paths = paths.filter((p) => p !== path);
    store(paths);
    if (path === current) {
      location.href = paths.length ? bar.dataset.pageUrl + encodeURIComponent(paths[paths.length - 1])
        : bar.dataset.pageUrl.replace(/&path=$/, "");
    } else {
      render();
    }
  }

  function render() {
    bar.replaceChildren();
    for (const path of paths) {
      const mark = marks.get(path) || {};
      const dirty = unsaved(path);
      const tab = document.createElement("span");
      tab.className = "file-tab" + (path === current ? " current" : "") + (dirty ? " unsaved" : "")
        + (mark.gone ? " gone" : "") + (mark.session ? ` session-${mark.session}` : "");
      tab.dataset.path = path;
      const link = document.createElement("a");
      link.href = bar.dataset.pageUrl + encodeURIComponent(path);
      link.textContent = path.split("/").pop();
      const said = [path];
      if (dirty) said.push("unsaved text, kept in this browser");
      if (mark.gone) said.push(mark.gone);
      if (mark.sessionText) said.push(mark.sessionText);
      link.title = said.join(" · ");
      link.setAttribute("aria-label", said.join(", "));
      if (path === current) link.setAttribute("aria-current", "page");
      if (dirty) {
        const dot = document.createElement("span");
        dot.className = "unsaved-dot";
        dot.setAttribute("aria-hidden", "true");
        dot.textContent = "●";
        link.prepend(dot);
      }
      if (mark.session) {
        const badge = document.createElement("span");
        badge.className = "session-badge";
        badge.setAttribute("aria-hidden", "true");
        badge.textContent = mark.session === "conflict" ? "S!" : "S";
        link.append(badge);
      }
      if (mark.goneShort) {
        const gone = document.createElement("span");
        gone.className = "gone-why";
        gone.textContent = mark.goneShort;
        link.append(gone);
      }
      const closer = document.createElement("button");
      closer.type = "button";
      closer.className = "close";
      closer.textContent = "×";
      closer.setAttribute("aria-label", `Close ${path}`);
      closer.addEventListener("click", () => close(path));
      tab.append(link, closer);
      bar.append(tab);
    }
    bar.hidden = paths.length === 0;
  }
  render();

  // The editor says when its text becomes unsaved or saved.
  document.addEventListener("berth:draft", render);

  window.BerthTabs = {
    paths: () => [...paths],
    current,
    // Its file went from the branch: closed with a word why, or (holding unsaved
    // text, or open in the editor) kept and marked.
    gone(path, why, short) {
      if (path !== current && !unsaved(path)) {
        paths = paths.filter((p) => p !== path);
        store(paths);
        tell(`Closed ${path}: ${why}.`);
      } else {
        marks.set(path, { ...(marks.get(path) || {}), gone: why, goneShort: short });
      }
      render();
    },
    session(path, state, text) {
      marks.set(path, { ...(marks.get(path) || {}), session: state, sessionText: text });
      render();
    },
  };
})();
