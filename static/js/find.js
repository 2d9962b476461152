// Finding things on the workspace page: the search panel (Ctrl/⌘+Shift+F; the server
// searches, htmx swaps its results in), quick open (Ctrl/⌘+P: a fuzzy match over the
// paths of the ref shown, fetched once), and the shortcut sheet (?). Keys are read in
// the capture phase on window, before the editor (CodeMirror) or a terminal sees them.
(function () {
  "use strict";

  const panel = document.getElementById("search-panel");
  const toggle = document.querySelector("[data-search-toggle]");
  const quick = document.getElementById("quick-open");
  const sheet = document.getElementById("shortcuts");

  function typing(el) {
    return !!el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
  }

  // -- the search panel ----------------------------------------------------------------

  function openSearch() {
    if (!panel) return;
    panel.hidden = false;
    toggle?.setAttribute("aria-expanded", "true");
    const field = panel.querySelector("input[name=q]");
    // What is selected in the editor (one line of it) is what to look for.
    const view = window.berthEditor && window.berthEditor.view;
    if (view) {
      const sel = view.state.selection.main;
      const picked = view.state.sliceDoc(sel.from, sel.to);
      if (picked && !picked.includes("\n") && picked.length <= 200) field.value = picked;
    }
    field.focus();
    field.select();
  }

  toggle?.addEventListener("click", () => {
    if (panel.hidden) openSearch();
    else {
      panel.hidden = true;
      toggle.setAttribute("aria-expanded", "false");
    }
  });

  // -- quick open --------------------------------------------------------------------

  const SHOWN = 50;
  let paths = null; // fetched on first use
  let truncated = false;
  let active = 0;

  // Higher is better; -1 when `query` (lower case) is not a subsequence of the path.
  // Consecutive letters, letters starting a name or a word, and letters in the file's
  // own name count more; a shorter path wins a tie.
  function score(query, path) {
    const p = path.toLowerCase();
    const name = p.lastIndexOf("/") + 1;
    let qi = 0;
    let total = 0;
    let prev = -2;
    for (let i = 0; i < p.length && qi < query.length; i++) {
      if (p[i] !== query[qi]) continue;
      let bonus = 1;
      if (i === prev + 1) bonus += 5;
      if (i === 0 || "/_-. ".includes(p[i - 1])) bonus += 3;
      if (i >= name) bonus += 2;
      total += bonus;
      prev = i;
      qi++;
    }
    return qi < query.length ? -1 : total - p.length / 100;
  }

  function render() {
    const input = quick.querySelector("input");
    const list = quick.querySelector("[role=listbox]");
    const status = quick.querySelector("[data-quick-status]");
    const query = input.value.trim().toLowerCase().replace(/\s+/g, "");
    let hits;
    if (!query) hits = paths.slice(0, SHOWN);
    else {
      hits = [];
      for (const path of paths) {
        const s = score(query, path);
        if (s >= 0) hits.push([s, path]);
      }
      hits.sort((a, b) => b[0] - a[0] || a[1].localeCompare(b[1]));
      hits = hits.slice(0, SHOWN).map((h) => h[1]);
    }
    active = Math.min(active, Math.max(0, hits.length - 1));
    list.replaceChildren(...hits.map((path, i) => {
      const item = document.createElement("li");
      item.id = `quick-open-${i}`;
      item.setAttribute("role", "option");
      item.setAttribute("aria-selected", String(i === active));
      // An option holds no link (no control inside a control); choosing it navigates.
      item.dataset.href = quick.dataset.pageUrl + encodeURIComponent(path);
      const slash = path.lastIndexOf("/");
      const name = document.createElement("strong");
      name.textContent = path.slice(slash + 1);
      item.append(name);
      if (slash > 0) {
        const folder = document.createElement("span");
        folder.className = "folder";
        folder.textContent = " " + path.slice(0, slash);
        item.append(folder);
      }
      return item;
    }));
    if (hits.length) input.setAttribute("aria-activedescendant", `quick-open-${active}`);
    else input.removeAttribute("aria-activedescendant");
    status.textContent = hits.length ? (truncated ? `Only the first ${paths.length} paths are searched.` : "")
      : "No file matches.";
  }

  async function openQuick() {
    if (!quick) return;
    if (!quick.open) quick.showModal();
    const input = quick.querySelector("input");
    input.value = "";
    active = 0;
    input.focus();
    if (paths === null) {
      quick.querySelector("[data-quick-status]").textContent = "Loading the file list…";
      try {
        const response = await fetch(quick.dataset.pathsUrl, { credentials: "same-origin", headers: { Accept: "application/json" } });
        const data = await response.json();
        if (!response.ok) throw new Error((data.error && data.error.message) || "refused");
        paths = data.paths;
        truncated = data.truncated;
      } catch (err) {
        quick.querySelector("[data-quick-status]").textContent = `Could not list the files: ${err.message}`;
        return;
      }
    }
    render();
  }

  if (quick) {
    const input = quick.querySelector("input");
    input.addEventListener("input", () => {
      active = 0;
      if (paths) render();
    });
    input.addEventListener("keydown", (event) => {
      const count = quick.querySelectorAll("[role=option]").length;
      if (event.key === "ArrowDown" || event.key === "ArrowUp") {
        event.preventDefault();
        if (!count) return;
        active = (active + (event.key === "ArrowDown" ? 1 : count - 1)) % count;
        render();
        quick.querySelector(`#quick-open-${active}`)?.scrollIntoView({ block: "nearest" });
      } else if (event.key === "Enter") {
        event.preventDefault();
        const option = quick.querySelector(`#quick-open-${active}`);
        if (option) location.assign(option.dataset.href);
      }
    });
    // A click on an option opens its file; one outside the box closes it.
    quick.addEventListener("click", (event) => {
      const option = event.target.closest("[role=option]");
      if (option) location.assign(option.dataset.href);
      else if (event.target === quick) quick.close();
    });
  }

  // -- the keys ------------------------------------------------------------------------

  window.addEventListener("keydown", (event) => {
    const mod = event.ctrlKey || event.metaKey;
    const key = event.key.toLowerCase();
    let act = null;
    // In a terminal, Ctrl+P is the shell's (previous command); ⌘+P still opens files.
    const shell = event.ctrlKey && event.target.closest && event.target.closest(".xterm");
    if (mod && !event.shiftKey && !event.altKey && key === "p" && quick && !shell) act = openQuick;
    else if (mod && event.shiftKey && !event.altKey && key === "f" && panel) act = openSearch;
    else if (event.key === "?" && !mod && !event.altKey && sheet && !typing(event.target) && !sheet.open) {
      act = () => sheet.showModal();
    }
    if (!act) return;
    event.preventDefault();
    event.stopPropagation();
    if (quick?.open && act !== openQuick) quick.close();
    act();
  }, true);

  document.querySelector("[data-shortcuts]")?.addEventListener("click", () => sheet?.showModal());
})();
