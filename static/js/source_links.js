// File paths in a log's tracebacks and compiler messages, linked to the file and line
// in the workspace: `File "/workspace/app.py", line 12` (Python) and `app.py:12:`
// (pytest, mypy, ruff, gcc; `./` or `/workspace/` before it too).
//
// Log text is untrusted: only a path inside /workspace that passes the same rules as
// workspaces/paths.py (no `..`, `.`, empty or `.git` component, no control character or
// backslash, at most 1024 bytes and 32 levels) becomes a link, and the link is always
// the workspace page of this Berth (`data-source-url` on an element around the log,
// set by the server) with the path as a query value. Text stays text nodes.
(function (root) {
  "use strict";

  const PYTHON = /File "([^"\n]{1,1100})", line (\d{1,7})/g;
  const PLAIN = /^[A-Za-z0-9_.@+\-\/]+$/;
  const COLON = /(^|[\s(\['"])((?:\.\/|\/workspace\/)?[A-Za-z0-9_.@+\-\/]{1,1100}):(\d{1,7}):/g;

  // The path relative to /workspace, or null when it is outside it or breaks a rule. A
  // relative path is taken from the command's working directory, `cwd` (relative to
  // /workspace: "" for /workspace itself; null for one outside it: no relative links).
  function inWorkspace(raw, cwd) {
    let path = raw;
    if (path.startsWith("/workspace/")) path = path.slice("/workspace/".length);
    else if (path.startsWith("/") || cwd === null || cwd === undefined) return null;
    else path = (cwd ? cwd + "/" : "") + (path.startsWith("./") ? path.slice(2) : path);
    if (!path || path.includes("\\") || /[\x00-\x1f\x7f]/.test(path)) return null;
    if (new TextEncoder().encode(path).length > 1024) return null;
    const parts = path.split("/");
    if (parts.length > 32) return null;
    for (const part of parts) {
      if (part === "" || part === "." || part === ".." || part.toLowerCase() === ".git") return null;
    }
    return path;
  }

  // Matches in one string: [start, end, path, line], in order, not overlapping.
  function find(text, cwd = "") {
    const found = [];
    for (const m of text.matchAll(PYTHON)) {
      // Relative to the working directory, /workspace; never "<string>" or "<frozen …>".
      const path = m[1].startsWith("/") || PLAIN.test(m[1]) ? inWorkspace(m[1], cwd) : null;
      if (path) found.push([m.index, m.index + m[0].length, path, +m[2]]);
    }
    for (const m of text.matchAll(COLON)) {
      const start = m.index + m[1].length;
      // A bare word is no file ("ERROR:12:"): it needs a folder or a dot.
      if (!/[./]/.test(m[2]) || !/[A-Za-z]/.test(m[2])) continue;
      const path = inWorkspace(m[2], cwd);
      const end = start + m[2].length + 1 + m[3].length;
      if (path && !found.some((f) => start < f[1] && end > f[0])) found.push([start, end, path, +m[3]]);
    }
    return found.filter((f) => f[3] > 0).sort((a, b) => a[0] - b[0]);
  }

  // Link what `row` shows, text node by text node (a path split by a colour change is
  // left as it is).
  function link(row, base) {
    if (!base || !base.url) return;
    const walker = document.createTreeWalker(row, NodeFilter.SHOW_TEXT);
    const nodes = [];
    while (walker.nextNode()) nodes.push(walker.currentNode);
    for (const node of nodes) {
      const text = node.nodeValue;
      const found = find(text, base.cwd);
      if (!found.length) continue;
      const fragment = document.createDocumentFragment();
      let at = 0;
      for (const [start, end, path, line] of found) {
        fragment.append(text.slice(at, start));
        const a = document.createElement("a");
        a.className = "source-link";
        a.href = `${base.url}${encodeURIComponent(path)}&line=${line}`;
        a.title = `Open ${path} at line ${line}`;
        a.textContent = text.slice(start, end);
        fragment.append(a);
        at = end;
      }
      fragment.append(text.slice(at));
      node.replaceWith(fragment);
    }
  }

  function baseOf(el) {
    const holder = el.closest("[data-source-url]");
    if (!holder) return null;
    // The working directory: /workspace, unless the command's element names another.
    const cwd = (el.closest("[data-source-cwd]") || holder).dataset.sourceCwd || "/workspace";
    const inside = cwd === "/workspace" ? "" : cwd.startsWith("/workspace/") ? cwd.slice(11).replace(/\/+$/, "") : null;
    return { url: holder.dataset.sourceUrl, cwd: inside };
  }

  // Lines the server rendered (an ended exec's output) are linked where they stand.
  function linkAll(scope) {
    scope.querySelectorAll("[data-source-url] .log-lines .line").forEach((row) => {
      if (row.dataset.linked) return;
      row.dataset.linked = "1";
      link(row, baseOf(row));
    });
  }

  root.BerthSourceLinks = { find, link, baseOf };
  if (typeof document !== "undefined") {
    document.addEventListener("DOMContentLoaded", () => linkAll(document));
    document.addEventListener("htmx:load", () => linkAll(document));
  }
})(typeof window !== "undefined" ? window : globalThis);
