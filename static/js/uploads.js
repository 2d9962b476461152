// Files dropped onto the file tree, or picked with its Upload button, go into the folder
// they were dropped on (the page's folder otherwise) as one commit on the branch
// (workspaces/uploads.py: the API's path and size rules). A batch past the caps the page
// was given is refused here at once, with the same typed error the server would give.
(function () {
  "use strict";
  const pane = document.querySelector(".files[data-upload-url]");
  if (!pane) return;
  const status = pane.querySelector("[data-upload-status]");
  const input = pane.querySelector("[data-upload-input]");
  const csrf = JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"];
  const caps = {
    file: Number(pane.dataset.maxFileBytes),
    body: Number(pane.dataset.maxBodyBytes),
    files: Number(pane.dataset.maxFiles),
  };
  const MB = 1024 * 1024;

  function say(text, error) {
    status.hidden = !text;
    status.textContent = text || "";
    status.classList.toggle("error", Boolean(error));
    status.setAttribute("role", error ? "alert" : "status");
  }

  // The folder a drop lands in: the folder row under the pointer, a file's own folder,
  // or the folder the page shows.
  function folderAt(target) {
    const item = target && target.closest && target.closest(".tree li");
    if (item) {
      const dir = item.querySelector(":scope > .dir-page");
      if (dir) return dir.dataset.path;
      const file = item.querySelector(":scope > a.entry");
      if (file) return file.dataset.path.split("/").slice(0, -1).join("/");
    }
    return pane.dataset.folder || "";
  }

  function refused(files) {
    if (files.length > caps.files) {
      return { code: "too_many_files", message: `An upload holds at most ${caps.files} files; upload the rest in another batch, or push them with git.` };
    }
    const big = files.find((f) => f.size > caps.file);
    if (big) {
      return { code: "file_too_large", message: `'${big.name}' is ${(big.size / MB).toFixed(1)} MB; files may be at most ${Math.floor(caps.file / MB)} MB. Keep large files out of the workspace.` };
    }
    const total = files.reduce((sum, f) => sum + f.size, 0);
    if (total > caps.body - 64 * 1024) {
      return { code: "too_large", message: `These files are ${(total / MB).toFixed(1)} MB together; one upload carries at most ${Math.floor(caps.body / MB)} MB. Upload them in smaller batches.` };
    }
    return null;
  }

  // A dropped folder: its files with their paths below the drop, walked until there are
  // more than an upload may hold (the refusal then says so).
  async function walk(entries) {
    const found = [];
    const queue = entries.map((entry) => [entry, ""]);
    while (queue.length && found.length <= caps.files) {
      const [entry, prefix] = queue.shift();
      if (entry.isFile) {
        const file = await new Promise((ok, fail) => entry.file(ok, fail));
        found.push({ file, path: prefix + entry.name });
      } else if (entry.isDirectory) {
        const reader = entry.createReader();
        for (;;) {
          const batch = await new Promise((ok, fail) => reader.readEntries(ok, fail));
          if (!batch.length) break;
          for (const child of batch) queue.push([child, `${prefix}${entry.name}/`]);
        }
      }
    }
    return found;
  }

  async function upload(items, folder) {
    if (!items.length) return;
    const files = items.map((item) => item.file);
    const early = refused(files);
    if (early) return say(`${early.message} (${early.code})`, true);
    const body = new FormData();
    body.append("branch", pane.dataset.branch);
    body.append("base_commit", pane.dataset.baseCommit);
    body.append("folder", folder);
    for (const item of items) {
      body.append("files", item.file, item.file.name);
      body.append("paths", item.path);
    }
    say(`Uploading ${files.length} file(s) to ${folder || "the root folder"}…`);
    let answer;
    try {
      const response = await fetch(pane.dataset.uploadUrl, {
        method: "POST",
        body,
        credentials: "same-origin",
        headers: { Accept: "application/json", "X-CSRFToken": csrf },
      });
      answer = await response.json();
    } catch {
      return say("Could not reach Berth; nothing was uploaded. Check your connection and try again.", true);
    }
    if (answer.error) return say(`${answer.error.message} (${answer.error.code})`, true);
    location.assign(answer.url);
  }

  let depth = 0; // dragenter/leave fire for every child the pointer crosses
  let marked = null;
  function mark(target) {
    const row = target && target.closest && target.closest(".tree li");
    if (marked && marked !== row) marked.classList.remove("drop-here");
    marked = row;
    if (row) row.classList.add("drop-here");
  }
  function clear() {
    depth = 0;
    pane.classList.remove("dragging");
    mark(null);
  }
  const carriesFiles = (event) => event.dataTransfer && Array.from(event.dataTransfer.types || []).includes("Files");
  pane.addEventListener("dragenter", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    depth += 1;
    pane.classList.add("dragging");
  });
  pane.addEventListener("dragover", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "copy";
    mark(event.target);
  });
  pane.addEventListener("dragleave", () => {
    depth -= 1;
    if (depth <= 0) clear();
  });
  pane.addEventListener("drop", async (event) => {
    if (!event.dataTransfer || !event.dataTransfer.files.length) return;
    event.preventDefault();
    const folder = folderAt(event.target);
    clear();
    const entries = Array.from(event.dataTransfer.items || [])
      .map((item) => (item.webkitGetAsEntry ? item.webkitGetAsEntry() : null));
    let items;
    if (entries.length && entries.every(Boolean) && entries.some((entry) => entry.isDirectory)) {
      try {
        items = await walk(entries);
      } catch {
        return say("Could not read the dropped folder; nothing was uploaded.", true);
      }
    } else {
      items = Array.from(event.dataTransfer.files).map((file) => ({ file, path: file.name }));
    }
    upload(items, folder);
  });

  pane.querySelector("[data-upload-pick]").addEventListener("click", () => input.click());
  input.addEventListener("change", () => {
    upload(Array.from(input.files).map((file) => ({ file, path: file.name })), pane.dataset.folder || "");
    input.value = "";
  });
})();
