// A session on this branch has its own copy of the files. The editor marks the files
// whose session copy differs (in the tree, the tabs, and a list with a link to open
// each copy), and the files a write on the branch left as the session had them — a
// save "the session left alone" — as a conflict, with a banner on the open file.
// The session's files are read by its runner agent (sessions/editor_views.py) while
// it is ready; a look never keeps it from freezing.
(function () {
  "use strict";
  const box = document.getElementById("session-marks");
  if (!box) return;
  const page = window.BerthPage || null;
  const current = page ? page.path : (window.BerthTabs && window.BerthTabs.current) || "";
  const banner = document.getElementById("session-conflict");
  const statusLine = box.querySelector(".session-marks-status");
  const list = box.querySelector(".session-files");
  const sessionsUrl = box.dataset.sessionsUrl;

  function copyUrl(session, path) {
    return `${sessionsUrl}${encodeURIComponent(session)}/copy/?path=${encodeURIComponent(path)}`;
  }

  function markTree(path, state, text) {
    for (const link of document.querySelectorAll(".tree a.entry[data-path]")) {
      if (link.dataset.path !== path) continue;
      link.classList.remove("session-changed", "session-conflict");
      link.classList.add(`session-${state}`);
      link.title = `${path} · ${text}`;
    }
  }

  function link(href, text, id) {
    const a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    if (id) a.id = id;
    return a;
  }

  function conflict(session, path) {
    const text = `session ${session} kept its own copy: it had changed this file too`;
    markTree(path, "conflict", text);
    const item = [...list ? list.children : []].find((li) => li.dataset.path === path);
    if (item && item.className !== "session-conflict") {
      item.className = "session-conflict";
      item.lastChild.textContent += ", conflict";
    }
    window.BerthTabs?.session(path, "conflict", text);
    if (path !== current || !banner) return;
    banner.replaceChildren(
      document.createTextNode(`Conflict with session ${session}: it had changed ${path} too, so a write on the branch was left out of its copy (nothing of the session's was overwritten). The branch and the session now differ here: `),
      link(copyUrl(session, path), "open the session's copy", "open-session-copy-conflict"),
      document.createTextNode(", then commit the session's version from its page, or make its copy match the branch's."),
    );
    banner.hidden = false;
  }

  function changed(session, path, how, inConflict) {
    if (inConflict) return conflict(session, path);
    const text = `session ${session}'s copy differs (${how})`;
    markTree(path, "changed", text);
    window.BerthTabs?.session(path, "changed", text);
  }

  const session = box.dataset.session;
  const conflicts = new Set(session ? JSON.parse(document.getElementById("session-conflicts").textContent) : []);
  for (const path of conflicts) conflict(session, path);

  async function read() {
    try {
      const response = await fetch(box.dataset.marksUrl, { credentials: "same-origin", headers: { "Accept": "application/json" } });
      const data = await response.json();
      if (!response.ok) {
        statusLine.textContent = (data.error && data.error.message) || "its files could not be read now.";
        return;
      }
      for (const path of data.conflicts) conflicts.add(path);
      const paths = Object.keys(data.changed);
      list.replaceChildren();
      for (const path of paths) {
        changed(session, path, data.changed[path], conflicts.has(path));
        const item = document.createElement("li");
        item.className = `session-${conflicts.has(path) ? "conflict" : "changed"}`;
        item.dataset.path = path;
        item.append(link(copyUrl(session, path), path), document.createTextNode(` ${data.changed[path]}${conflicts.has(path) ? ", conflict" : ""}`));
        list.append(item);
      }
      list.hidden = paths.length === 0;
      statusLine.replaceChildren();
      if (paths.length === 0) {
        statusLine.textContent = `its files are the same as ${page ? page.branch : "the branch"}'s.`;
      } else {
        statusLine.append(`${paths.length} file(s) differ in its copy${data.truncated ? " (the first ones listed)" : ""}.`);
        if (current && paths.includes(current)) {
          statusLine.append(" This one does: ", link(copyUrl(session, current), "open the session's copy", "open-session-copy"), ".");
        }
      }
    } catch {
      statusLine.textContent = "its files could not be read now; reload to try again.";
    }
  }
  if (session && box.dataset.state === "ready") read();

  // A save the session left alone (it had changed the file too): a conflict, now.
  document.addEventListener("berth:saved", (event) => {
    for (const follower of event.detail.followers || []) {
      if (follower.state !== "conflict") continue;
      for (const item of follower.conflicts || []) conflict(follower.id, item.path);
    }
  });
})();
