// The workspace pages' behaviour: the file tree, the branch switcher, the editor and
// saving. Everything else is server-rendered; htmx swaps the tree and dialog errors.
(function () {
  "use strict";

  // Folder links keep a real href (open in a new tab, no-JS), but a plain click
  // toggles the folder in place; htmx loads its entries on the first opening.
  document.addEventListener("click", (event) => {
    const link = event.target.closest(".tree summary a");
    if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
    event.preventDefault();
    const folder = link.closest("details");
    folder.open = !folder.open;
  });

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

  const mount = document.getElementById("editor");
  if (!mount || !window.BerthEditor) return;

  const csrf = JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"];
  const path = mount.dataset.path;
  const branch = mount.dataset.branch;
  const readOnly = mount.hasAttribute("data-readonly");
  const dirtyMark = document.getElementById("dirty");
  const form = document.getElementById("savebar");
  const message = document.getElementById("commit-message");
  const saveButton = document.getElementById("save");
  const status = document.getElementById("save-status");
  // The commit this text was loaded at; a save is refused (409) once the branch moved.
  let baseCommit = mount.dataset.baseCommit;
  let saving = false;

  mount.replaceChildren();
  const editor = window.BerthEditor.create(mount, {
    doc: JSON.parse(document.getElementById("file-text").textContent),
    path,
    readOnly,
    onSave: () => save(),
    onChange: (dirty) => { if (dirtyMark) dirtyMark.hidden = !dirty; },
  });
  window.berthEditor = editor;
  if (!readOnly) editor.focus();

  function show(kind, html) {
    status.className = `save-status ${kind}`;
    status.innerHTML = html;
  }

  function escape(text) {
    const span = document.createElement("span");
    span.textContent = String(text);
    return span.innerHTML;
  }

  async function save() {
    if (readOnly || !form || saving) return;
    saving = true;
    saveButton.disabled = true;
    show("busy", "Saving…");
    const text = editor.getText();
    try {
      const response = await fetch(mount.dataset.saveUrl, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "Accept": "application/json", "X-CSRFToken": csrf },
        body: JSON.stringify({ path, branch, base_commit: baseCommit, content: text, message: message.value }),
      });
      const type = response.headers.get("Content-Type") || "";
      if (!type.startsWith("application/json")) {
        show("error", "Your session has ended. Sign in again in another tab, then save; your text is kept here.");
        return;
      }
      const data = await response.json();
      if (response.ok) saved(data, text);
      else failed(response.status, data.error || {});
    } catch (err) {
      show("error", "Could not reach Berth; nothing was saved. Your text is kept here; try again.");
    } finally {
      saving = false;
      saveButton.disabled = false;
    }
  }

  function saved(data, text) {
    baseCommit = data.commit;
    // The page's other forms (new file, rename, delete, new branch) now start from here.
    document.querySelectorAll("input[name=base_commit], input[name=from_ref]").forEach((input) => {
      input.value = data.commit;
    });
    const pageCommit = document.getElementById("page-commit");
    if (pageCommit) {
      pageCommit.textContent = data.commit.slice(0, 7);
      pageCommit.href = data.commit_url;
    }
    const size = document.getElementById("file-size");
    if (size) size.textContent = `${new Blob([text]).size} bytes`;
    // Typing during the request is not saved: only mark what was sent.
    if (editor.getText() === text) editor.markSaved();
    message.value = "";
    let html = `Saved as <a class="mono" href="${escape(data.commit_url)}">${escape(data.commit.slice(0, 7))}</a>.`;
    // Sessions following the branch: each has the save, or says when it will.
    const followers = data.followers || [];
    if (followers.length) {
      html += '<ul class="followers">' + followers.map((f) => `<li>Session <span class="mono">${escape(f.id)}</span>: ${escape(f.message)}</li>`).join("") + "</ul>";
    }
    const conflicted = followers.some((f) => f.state === "conflict");
    if ((data.warnings && data.warnings.length) || conflicted) {
      html += '<ul class="warnings">' + (data.warnings || []).map((w) => `<li>${escape(w.message)}</li>`).join("") + "</ul>";
      show("warn", html);
    } else {
      show("ok", html);
    }
  }

  function failed(code, error) {
    const head = (error.details || {}).head;
    if (code === 409 && head) {
      // Show what landed (their commit, against the text this editor was loaded at), and
      // let the person save over it once they have looked: nothing is lost either way.
      const compare = `${mount.dataset.compareUrl}?base=${encodeURIComponent(baseCommit)}&head=${encodeURIComponent(head)}&path=${encodeURIComponent(path)}`;
      show("error", `<strong>Not saved: ${escape(branch)} moved</strong> since you opened this file ` +
        `(someone else committed <a class="mono" href="${escape(mount.dataset.commitsUrl + head + "/")}">${escape(head.slice(0, 7))}</a>). ` +
        `Your text is still in the editor. <a id="see-changes" href="${escape(compare)}" target="_blank" rel="noopener">See what changed</a>, then ` +
        '<button type="button" class="small" id="save-over">save yours on top of it</button> or reload to start from theirs.');
      document.getElementById("save-over").addEventListener("click", () => {
        baseCommit = head;
        save();
      });
    } else if (code === 409) {
      show("error", `<strong>Not saved:</strong> ${escape(error.message || "the branch moved")} ` +
        'Your text is still in the editor; <a href="">reload</a> and apply it again.');
    } else if (error.code === "no_changes") {
      show("muted", "Nothing to save: the file is as it was.");
      editor.markSaved();
    } else {
      show("error", `Not saved: ${escape(error.message || "the server refused the change")}`);
    }
  }

  if (form) form.addEventListener("submit", (event) => { event.preventDefault(); save(); });

  // Ctrl/Cmd-S anywhere on the page (e.g. in the message box) saves; inside the editor
  // CodeMirror's own binding handles it and marks the event handled.
  document.addEventListener("keydown", (event) => {
    if ((event.ctrlKey || event.metaKey) && event.key.toLowerCase() === "s" && !event.defaultPrevented) {
      event.preventDefault();
      save();
    }
  });

  window.addEventListener("beforeunload", (event) => {
    if (editor.isDirty()) event.preventDefault();
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
  document.addEventListener("keydown", (event) => {
    if ((event.ctrlKey || event.metaKey) && event.key === "Enter" && !event.defaultPrevented) {
      event.preventDefault();
      if (input.value.trim()) form.requestSubmit();
      else input.focus();
    }
  });
})();

// Tabs of the files opened in this browser tab (per workspace and ref): each a link
// that opens the file, the current one marked, with a button that closes it. The
// editor holds one file at a time: a tab with unsaved text warns before it leaves.
(function () {
  "use strict";
  const bar = document.querySelector(".file-tabs[data-tabs-key]");
  if (!bar) return;
  const key = bar.dataset.tabsKey;
  const current = bar.dataset.current;
  const MAX = 12;

  function load() {
    try { return JSON.parse(sessionStorage.getItem(key) || "[]"); } catch { return []; }
  }
  function store(paths) {
    try { sessionStorage.setItem(key, JSON.stringify(paths)); } catch { /* private mode */ }
  }
  let paths = load();
  if (current && !paths.includes(current)) paths = [...paths, current].slice(-MAX);
  store(paths);

  function render() {
    bar.replaceChildren();
    for (const path of paths) {
      const tab = document.createElement("span");
      tab.className = "file-tab" + (path === current ? " current" : "");
      const link = document.createElement("a");
      link.href = bar.dataset.pageUrl + encodeURIComponent(path);
      link.textContent = path.split("/").pop();
      link.title = path;
      if (path === current) link.setAttribute("aria-current", "page");
      const close = document.createElement("button");
      close.type = "button";
      close.className = "close";
      close.textContent = "×";
      close.setAttribute("aria-label", `Close ${path}`);
      close.addEventListener("click", () => {
        paths = paths.filter((p) => p !== path);
        store(paths);
        if (path === current) {
          location.href = paths.length ? bar.dataset.pageUrl + encodeURIComponent(paths[paths.length - 1])
            : bar.dataset.pageUrl.replace(/&path=$/, "");
        } else {
          render();
        }
      });
      tab.append(link, close);
      bar.append(tab);
    }
    bar.hidden = paths.length === 0;
  }
  render();
})();
