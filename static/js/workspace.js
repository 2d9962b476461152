// The workspace pages' behaviour: the file tree, the branch switcher, dialogs and the
// run box (the editor and saving are editing.js; drafts and tabs drafts.js; what the
// branch and a session did to open files watch.js and session_marks.js). Everything
// else is server-rendered; htmx swaps the tree and dialog errors.
(function () {
  "use strict";

  document.addEventListener("change", (event) => {
    if (event.target.matches("select[data-autosubmit]")) event.target.form.requestSubmit();
  });

  document.addEventListener("focusin", (event) => {
    if (event.target.matches("[data-select-all]")) event.target.select();
  });

  // A dialog opens with its first field focused, the caret at the end of its text.
  document.addEventListener("toggle", (event) => {
    const dialog = event.target;
    if (!dialog.matches || !dialog.matches("[popover]") || event.newState !== "open") return;
    const field = dialog.querySelector("input:not([type=hidden])");
    if (field) {
      field.focus();
      field.setSelectionRange(field.value.length, field.value.length);
    }
  }, true);

  // A folder opened before htmx had processed the page (a quick click while the deferred
  // scripts still load) fired its toggle with no one listening: it would stay open and
  // empty. htmx's own ready handler runs before this one (its script comes first), so
  // by now every folder listens; load those that were opened too early. "toggle once"
  // keeps a late native toggle from loading one twice.
  document.addEventListener("DOMContentLoaded", () => {
    if (!window.htmx) return;
    document.querySelectorAll(".tree details.dir[open][hx-get]").forEach((folder) => {
      if (!folder.querySelector(":scope > ul")) window.htmx.trigger(folder, "toggle");
    });
  });

  // 5xx answers are not swapped (see the htmx-config meta); say something anyway.
  document.addEventListener("htmx:responseError", (event) => {
    const status = event.detail.xhr.status;
    const slot = event.detail.elt.querySelector && event.detail.elt.querySelector(".form-error");
    if (status >= 500 && slot) slot.innerHTML = '<p class="error">Something went wrong on the server; nothing was changed. Try again.</p>';
  });
  document.addEventListener("htmx:sendError", (event) => {
    const slot = event.detail.elt.querySelector && event.detail.elt.querySelector(".form-error");
    if (slot) slot.innerHTML = '<p class="error">Could not reach Berth. Check your connection and try again.</p>';
  });
})();

// The run box: Ctrl/⌘+Enter runs from anywhere on the page, and the last commands run
// from this browser come back as suggestions (kept in this browser only).
(function () {
  "use strict";
  const input = document.getElementById("run-command");
  if (!input) return;
  const form = input.form;
  const list = document.getElementById("run-history");
  const key = input.dataset.historyKey;
  const KEEP = 15;

  function load() {
    try { return JSON.parse(localStorage.getItem(key) || "[]"); } catch { return []; }
  }
  function show(commands) {
    list.replaceChildren(...commands.map((c) => Object.assign(document.createElement("option"), { value: c })));
  }
  show(load());
  form.addEventListener("submit", () => {
    const command = input.value.trim();
    if (!command) return;
    const commands = [command, ...load().filter((c) => c !== command)].slice(0, KEEP);
    try { localStorage.setItem(key, JSON.stringify(commands)); } catch { /* private mode */ }
    show(commands);
  });
  // In the capture phase, on window: the editor (CodeMirror's Mod-Enter inserts a blank
  // line) would otherwise take the key first. A terminal keeps its own keys.
  window.addEventListener("keydown", (event) => {
    if (!(event.ctrlKey || event.metaKey) || event.key !== "Enter" || event.altKey) return;
    if (event.target.closest && event.target.closest(".xterm, dialog[open]")) return;
    event.preventDefault();
    event.stopPropagation();
    if (input.value.trim()) form.requestSubmit();
    else input.focus();
  }, true);
})();
