// The session page keeps itself current without a reload.
//
// `/ws/sessions/<id>` says the session's state at once and at each change (the
// runner agent's keeper and the lifecycle signal every move): when it differs from
// what `#session-status` shows, the status is asked for again (htmx, the page's URL).
// An exec started from the form was activity, so its answer asks for the status too
// (the `session-touched` event), for the clocks. Each exec's output streams through
// runs.js, on the exec's log door.
(function () {
  "use strict";

  let refreshing = Promise.resolve();

  // One refresh at a time, each aimed at the element present when it starts (as
  // runs.js does): htmx would queue a second request on the element the first replaces.
  function refresh(page) {
    refreshing = refreshing.then(() => {
      const target = document.getElementById("session-status");
      if (target && window.htmx) {
        return window.htmx.ajax("GET", page.dataset.statusUrl, { target, swap: "outerHTML" });
      }
    }).catch(() => {});
  }

  function watch(page) {
    let retry = 0;
    function connect() {
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      const socket = new WebSocket(`${scheme}//${location.host}${page.dataset.sessionWs}`);
      socket.addEventListener("open", () => { retry = 0; });
      socket.addEventListener("message", (event) => {
        const message = JSON.parse(event.data);
        if (message.type !== "state") return;
        const shown = document.getElementById("session-status");
        if (!shown || shown.dataset.state !== message.state || shown.dataset.reason !== (message.reason || "")) {
          refresh(page);
        }
      });
      socket.addEventListener("close", (event) => {
        // 1000: the session was deleted, nothing more will change; 4xxx: refused
        // (gone, or no longer ours), which retrying cannot help.
        if (event.code === 1000 || (event.code >= 4000 && event.code < 5000)) return;
        setTimeout(connect, Math.min(15000, 500 * 2 ** retry++));
      });
    }
    connect();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const page = document.querySelector("[data-session-ws]");
    if (!page) return;
    watch(page);
    document.body.addEventListener("session-touched", () => refresh(page));
    const form = document.getElementById("exec-form");
    if (!form) return;
    form.addEventListener("htmx:beforeRequest", () => {
      document.getElementById("exec-error").replaceChildren();
    });
    form.addEventListener("htmx:afterRequest", (event) => {
      if (!event.detail.successful) return;
      document.getElementById("no-execs")?.remove();
      form.reset();
      form.querySelector("input[name=command]").focus();
    });
  });
})();
