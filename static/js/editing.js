// The editor and saving. Work is never lost: unsaved text is kept in this browser as a
// draft (drafts.js) from the commit it was opened at, so a tab switch or a reload brings
// it back, and a save carries that base: the server merges it with what the branch got
// since, or, where both changed the same lines, refuses and shows what would be lost,
// with the choice named for what it does ("Overwrite their change").
(function () {
  "use strict";
  const mount = document.getElementById("editor");
  if (!mount || !window.BerthEditor) return;

  const Drafts = window.BerthDrafts;
  const csrf = JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"];
  const path = mount.dataset.path;
  const branch = mount.dataset.branch;
  const workspace = mount.dataset.workspace;
  const readOnly = mount.hasAttribute("data-readonly");
  const dirtyMark = document.getElementById("dirty");
  const form = document.getElementById("savebar");
  const message = document.getElementById("commit-message");
  const saveButton = document.getElementById("save");
  const status = document.getElementById("save-status");
  const news = document.getElementById("branch-news");
  const overlap = document.getElementById("overlap");
  // The commit (and this file's blob in it) the text was opened from: a save is merged
  // from there with whatever the branch got since.
  let baseCommit = mount.dataset.baseCommit;
  let baseBlob = mount.dataset.baseBlob;
  let saving = false;
  let discarded = false; // closed with its text thrown away: nothing kept on leaving
  let keptAsDraft = false;
  let overwriteHead = null; // the head whose overlapping lines the person was shown
  let keepTimer = null;

  const original = JSON.parse(document.getElementById("file-text").textContent);
  mount.replaceChildren();
  const editor = window.BerthEditor.create(mount, {
    doc: original,
    path,
    readOnly,
    onSave: () => save(),
    onChange: (dirty) => {
      if (dirtyMark) dirtyMark.hidden = !dirty;
    },
    onDocChange: () => schedule(),
  });
  window.berthEditor = editor;

  function escape(text) {
    const span = document.createElement("span");
    span.textContent = String(text);
    return span.innerHTML;
  }

  function show(kind, html) {
    status.className = `save-status ${kind}`;
    status.innerHTML = html;
  }

  function tell(kind, html) {
    if (!news) return;
    news.className = `banner news ${kind}`;
    news.innerHTML = html;
    news.hidden = !html;
  }

  // -- the draft -------------------------------------------------------------------

  // Store the text as it is now (or forget it once nothing is unsaved); whether it is
  // kept. Called shortly after typing stops, and synchronously as the page goes.
  function keep() {
    clearTimeout(keepTimer);
    if (readOnly || !branch || discarded) return true;
    let kept = true;
    if (editor.isDirty()) {
      kept = Drafts.put(workspace, branch, path, {
        text: editor.getText(),
        base_commit: baseCommit,
        base_blob: baseBlob,
        at: new Date().toISOString(),
      });
    } else {
      Drafts.drop(workspace, branch, path);
    }
    const now = editor.isDirty() && kept;
    if (now !== keptAsDraft) {
      keptAsDraft = now;
      document.dispatchEvent(new CustomEvent("berth:draft", { detail: { path, unsaved: now } }));
    }
    return kept;
  }

  // A draft of this file from before (another tab's page, a reload): back as it was. A
  // draft from an older version of the file keeps that version as its base, so its save
  // merges with what changed since instead of undoing it.
  const draft = branch && !readOnly ? Drafts.get(workspace, branch, path) : null;
  if (draft && draft.text === original) {
    Drafts.drop(workspace, branch, path);
  } else if (draft) {
    const older = draft.base_blob !== baseBlob && /^[0-9a-f]{40}$/.test(draft.base_commit || "");
    if (older) {
      baseCommit = draft.base_commit;
      baseBlob = draft.base_blob;
    }
    editor.setText(draft.text); // unsaved now; undo goes back to the branch's text
    keep();
    const when = draft.at ? new Date(draft.at).toLocaleString() : "earlier";
    tell("info", `Your unsaved text from ${escape(when)} is back (kept in this browser).` +
      (older ? ` ${escape(path)} changed on ${escape(branch)} since: saving merges your text with that change.` : "") +
      ' <button type="button" class="small ghost" id="discard-restored">Discard it</button>');
    document.getElementById("discard-restored").addEventListener("click", () => {
      replaceText(original);
      baseCommit = mount.dataset.baseCommit;
      baseBlob = mount.dataset.baseBlob;
      editor.markSaved();
      keep();
      tell("", "");
    });
  }

  // Kept once typing pauses, and at once when the page goes.
  function schedule() {
    clearTimeout(keepTimer);
    keepTimer = setTimeout(keep, 300);
  }

  window.addEventListener("pagehide", keep);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "hidden") keep();
  });
  // Asked only when the text could not be kept in this browser (private mode, quota).
  window.addEventListener("beforeunload", (event) => {
    if (editor.isDirty() && !keep()) event.preventDefault();
  });

  // The document becomes `text` with the smallest change, so the cursor and the
  // scroll stay where the person was.
  function replaceText(text) {
    const doc = editor.getText();
    let start = 0;
    while (start < doc.length && start < text.length && doc[start] === text[start]) start++;
    let end = doc.length;
    let to = text.length;
    while (end > start && to > start && doc[end - 1] === text[to - 1]) { end--; to--; }
    editor.view.dispatch({ changes: { from: start, to: end, insert: text.slice(start, to) } });
  }

  if (!readOnly) editor.focus();

  // `?line=12` (a search result, a link in a traceback): the cursor on that line, in view.
  const line = parseInt(mount.dataset.line || "", 10);
  if (line > 0) {
    const doc = editor.view.state.doc;
    const at = doc.line(Math.min(line, doc.lines)).from;
    editor.view.dispatch({ selection: { anchor: at }, scrollIntoView: true });
    editor.focus();
  }

  // -- saving ----------------------------------------------------------------------

  async function save(overwrite) {
    if (readOnly || !form || saving) return;
    saving = true;
    saveButton.disabled = true;
    show("busy", "Saving…");
    const text = editor.getText();
    const body = { path, branch, base_commit: baseCommit, content: text, message: message.value };
    if (overwrite) body.overwrite = overwrite;
    try {
      const response = await fetch(mount.dataset.saveUrl, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "Accept": "application/json", "X-CSRFToken": csrf },
        body: JSON.stringify(body),
      });
      const type = response.headers.get("Content-Type") || "";
      if (!type.startsWith("application/json")) {
        show("error", "Your session has ended. Sign in again in another tab, then save; your text is kept here and in this browser.");
        return;
      }
      const data = await response.json();
      if (response.ok) saved(data, text);
      else failed(response.status, data.error || {});
    } catch (err) {
      show("error", "Could not reach Berth; nothing was saved. Your text is kept here and in this browser; try again.");
    } finally {
      saving = false;
      saveButton.disabled = false;
    }
  }

  function saved(data, text) {
    overlap.hidden = true;
    overwriteHead = null;
    const unchanged = editor.getText() === text;
    if (!data.merged || unchanged) {
      // Typing during a merged save keeps its base: the next save merges again.
      baseCommit = data.commit;
      baseBlob = data.blob;
    }
    if (unchanged) {
      if (data.merged && typeof data.content === "string") replaceText(data.content);
      editor.markSaved();
    }
    keep();
    if (news && baseCommit === data.commit) tell("", "");
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
    if (size) size.textContent = `${new Blob([editor.getText()]).size} bytes`;
    message.value = "";
    let html = `Saved as <a class="mono" href="${escape(data.commit_url)}">${escape(data.commit.slice(0, 7))}</a>.`;
    if (data.merged) html += ` Merged with what ${escape(branch)} got since you opened the file: their lines are in the editor too.`;
    // Sessions following the branch: each has the save, or says when it will.
    const followers = data.followers || [];
    if (followers.length) {
      html += '<ul class="followers">' + followers.map((f) => `<li>Session <span class="mono">${escape(f.id)}</span>: ${escape(f.message)}</li>`).join("") + "</ul>";
    }
    // A sandbox contract typed here: a narrowing is the baseline now; a widening waits
    // for the team's approvers (docs/security.md 29, 30).
    const review = data.contract_review;
    if (review && review.state === "pending") {
      html += ` The wider sandbox contract waits for review: <a href="${escape(review.url)}">contract review ${escape(review.id)}</a>.`;
    } else if (review && review.state === "approved") {
      html += ` The sandbox contract is approved: <a href="${escape(review.url)}">contract review ${escape(review.id)}</a>.`;
    }
    const conflicted = followers.some((f) => f.state === "conflict");
    if ((data.warnings && data.warnings.length) || conflicted) {
      html += '<ul class="warnings">' + (data.warnings || []).map((w) => `<li>${escape(w.message)}</li>`).join("") + "</ul>";
      show("warn", html);
    } else {
      show("ok", html);
    }
    document.dispatchEvent(new CustomEvent("berth:saved", { detail: data }));
  }

  function compareUrl(base, head) {
    return `${mount.dataset.compareUrl}?base=${encodeURIComponent(base)}&head=${encodeURIComponent(head)}&path=${encodeURIComponent(path)}`;
  }

  function failed(code, error) {
    const details = error.details || {};
    if (code === 409 && Array.isArray(details.files) && details.head) {
      showOverlap(details);
      show("error", `<strong>Not saved: ${escape(branch)} moved</strong> and changed what you changed; ` +
        "see above what overwriting would lose. Your text is still in the editor (and kept in this browser).");
    } else if (code === 409 && details.head) {
      // The base is not a commit of the branch any more (history rewritten): what
      // landed can only be compared, then written over knowingly.
      const head = details.head;
      show("error", `<strong>Not saved: ${escape(branch)} moved</strong> since you opened this file, and the commit ` +
        `you started from is gone from it. Your text is still in the editor. <a id="see-changes-old" href="${escape(compareUrl(baseCommit, head))}" target="_blank" rel="noopener">See what changed</a>, then ` +
        '<button type="button" class="small danger" id="overwrite-all">Overwrite the branch\'s version</button> or reload to start from theirs.');
      document.getElementById("overwrite-all").addEventListener("click", () => {
        baseCommit = head;
        save();
      });
    } else if (code === 409) {
      show("error", `<strong>Not saved:</strong> ${escape(error.message || "the branch moved")} ` +
        'Your text is still in the editor; <a href="">reload</a> and apply it again.');
    } else if (error.code === "no_changes") {
      show("muted", "Nothing to save: the file is as it was.");
      editor.markSaved();
      keep();
    } else {
      show("error", `Not saved: ${escape(error.message || "the server refused the change")}`);
    }
  }

  // What overwriting would lose, and the choice named for what it does.
  function showOverlap(details) {
    const file = details.files.find((f) => f.path === path) || details.files[0];
    const where = escape(branch);
    const name = `<code>${escape(path)}</code>`;
    const titles = {
      both_changed: `Not saved: ${where} changed the same lines of ${name}`,
      added: `Not saved: ${name} was also created on ${where}, with other content`,
      deleted: `Not saved: ${name} was deleted or renamed on ${where}`,
    };
    const whys = {
      both_changed: "Your other changes merge with theirs. Overwriting keeps their other changes and puts your lines in place of theirs below: the lines marked − are theirs and would be lost; yours are marked +.",
      added: "Overwriting puts your lines in place of theirs below: the lines marked − are theirs and would be lost; yours are marked +.",
      deleted: "Saving anyway makes the file again with your text.",
    };
    const buttons = { both_changed: "Overwrite their change", added: "Overwrite their change", deleted: "Recreate the file with your text" };
    overlap.querySelector("#overlap-title").innerHTML = titles[file.why] || `Not saved: ${name} changed on ${where} too and cannot be merged here`;
    overlap.querySelector(".overlap-why").textContent = (whys[file.why] || `${file.message}. Overwriting replaces their version with yours: their change would be lost.`) +
      " Your text is still in the editor, and kept in this browser.";
    overlap.querySelector(".overlap-diff").replaceChildren(...(file.diff ? [diffTable(file.diff)] : []));
    overwriteHead = details.head;
    overlap.querySelector("#save-over").textContent = buttons[file.why] || "Overwrite their version";
    overlap.querySelector("#see-changes").href = compareUrl(details.base_commit || baseCommit, details.head);
    overlap.hidden = false;
    overlap.scrollIntoView({ block: "nearest" });
  }

  function diffTable(text) {
    const table = document.createElement("table");
    table.className = "diff";
    const body = table.createTBody();
    for (const line of text.split("\n")) {
      if (!line) continue;
      const kind = line.startsWith("@@") ? "hunk" : { "-": "del", "+": "add", "\\": "ctx" }[line[0]] || "ctx";
      const row = body.insertRow();
      row.className = kind;
      const cell = row.insertCell();
      cell.className = "code";
      if (kind === "hunk") {
        cell.textContent = line;
      } else {
        const mark = document.createElement("span");
        mark.className = "mark";
        mark.textContent = line[0] === "\\" ? " " : line[0];
        cell.append(mark, line[0] === "\\" ? line : line.slice(1));
      }
    }
    return table;
  }

  if (overlap) {
    overlap.querySelector("#save-over").addEventListener("click", () => {
      if (overwriteHead) save(overwriteHead);
    });
    overlap.querySelector("#keep-editing").addEventListener("click", () => {
      overlap.hidden = true;
      editor.focus();
    });
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

  // For watch.js (what the branch did to this file) and the tabs (a discarded draft).
  window.BerthPage = {
    path,
    branch,
    base: () => baseCommit,
    isDirty: () => editor.isDirty(),
    tell,
    // The branch moved without touching this file: later saves start from its head.
    rebase(head, blob) {
      baseCommit = head;
      baseBlob = blob;
      keep();
    },
    // The branch's new version of this file, taken while nothing here is unsaved.
    take(head, blob, text) {
      replaceText(text);
      editor.markSaved();
      baseCommit = head;
      baseBlob = blob;
      keep();
    },
    discard() {
      discarded = true;
      Drafts.drop(workspace, branch, path);
    },
  };
})();
