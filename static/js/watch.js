// What the branch did to the open files, said while editing. The page learns that
// something happened from the workspace's live activity feed (activity.js, a WebSocket:
// every commit, push and session commit is an Activity row), then asks the server
// where the branch is and what became of each open file since the commit it was opened
// at (workspaces/branch_watch.py):
// - the editor's file changed: its new text is taken when nothing here is unsaved;
//   otherwise the banner says who changed it, and that a save merges with it;
// - a tab's file was renamed or deleted: the tab is closed with a word why, or marked
//   while it holds unsaved text (which is never thrown away unseen).
(function () {
  "use strict";
  const bar = document.querySelector(".file-tabs[data-state-url]");
  if (!bar) return;
  const branch = bar.dataset.branch;
  const page = window.BerthPage && window.BerthPage.branch ? window.BerthPage : null;
  let timer = null;
  let asking = false;
  let again = false;

  function escape(text) {
    const span = document.createElement("span");
    span.textContent = String(text);
    return span.innerHTML;
  }

  function byWhom(by) {
    if (!by || !by.sha) return "";
    return ` by ${escape(by.author)} in <a class="mono" href="${escape(by.url)}">${escape(by.sha.slice(0, 7))}</a> (“${escape(by.title)}”)`;
  }

  async function check() {
    if (asking) { again = true; return; }
    asking = true;
    try {
      const tabs = window.BerthTabs ? window.BerthTabs.paths() : [];
      const base = page ? page.base() : bar.dataset.commit;
      const query = new URLSearchParams({ ref: branch, base });
      for (const path of new Set([...(page ? [page.path] : []), ...tabs])) query.append("path", path);
      if (page) query.set("open", page.path);
      const response = await fetch(`${bar.dataset.stateUrl}?${query}`, {
        credentials: "same-origin",
        headers: { "Accept": "application/json" },
      });
      if (!response.ok || !(response.headers.get("Content-Type") || "").startsWith("application/json")) return;
      const state = await response.json();
      for (const [path, file] of Object.entries(state.files)) {
        if (file.state === "renamed") {
          window.BerthTabs?.gone(path, `renamed to ${file.to} on ${branch}`, `→ ${file.to.split("/").pop()}`);
        } else if (file.state === "deleted") {
          window.BerthTabs?.gone(path, `no longer on ${branch} (deleted)`, "deleted");
        }
      }
      if (page && page.base() === base) said(state, state.files[page.path]);
    } catch {
      // Offline for a moment: the next activity or a return to the tab asks again.
    } finally {
      asking = false;
      if (again) { again = false; schedule(); }
    }
  }

  // What happened to the editor's own file.
  function said(state, file) {
    if (!file || !state.moved) return;
    const name = `<code>${escape(page.path)}</code>`;
    const where = escape(branch);
    if (file.state === "same") {
      page.rebase(state.head, file.blob);
    } else if (file.state === "changed" && !page.isDirty() && state.open) {
      page.take(state.head, state.open.blob, state.open.content);
      page.tell("info", `${name} changed on ${where}${byWhom(file.by)}; the editor now shows their version (you had nothing unsaved).`);
    } else if (file.state === "changed") {
      const compare = `${bar.dataset.compareUrl}?base=${encodeURIComponent(page.base())}&head=${encodeURIComponent(state.head)}&path=${encodeURIComponent(page.path)}`;
      page.tell("warn", `${name} changed on ${where}${byWhom(file.by)} since you opened it. Your text is kept; ` +
        `saving merges it with their change, and shows you first any line you both changed. <a id="see-their-change" href="${escape(compare)}" target="_blank" rel="noopener">See their change</a>`);
    } else {
      const what = file.state === "renamed" ? `renamed to <code>${escape(file.to)}</code>` : "deleted";
      page.tell("warn", `${name} was ${what} on ${where}${byWhom(file.by)}. Your text stays here and in this browser; saving it makes the file again at this path.`);
    }
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(check, 250);
  }
  document.addEventListener("berth:activity", schedule);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") schedule();
  });
  check();
})();

// A page for a file that is gone (renamed or deleted) shows the unsaved text it held,
// read-only, until the person discards it: never lost unseen.
(function () {
  "use strict";
  const box = document.getElementById("orphan-draft");
  if (!box) return;
  const { workspace, branch, path } = box.dataset;
  const draft = window.BerthDrafts.get(workspace, branch, path);
  if (!draft) return;
  box.querySelector("pre").textContent = draft.text;
  box.hidden = false;
  box.querySelector("#discard-draft").addEventListener("click", () => {
    window.BerthDrafts.drop(workspace, branch, path);
    box.hidden = true;
    document.dispatchEvent(new CustomEvent("berth:draft", { detail: { path, unsaved: false } }));
  });
})();
