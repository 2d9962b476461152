// Pages that wait update themselves: a state socket (`/ws/deploys/<id>`,
// `/ws/previews/<id>/state`, as `/ws/sessions/<id>`) says `{"type": "state", state, ...}`
// at once and at each move; the page asks for what it shows again.
//
// `BerthLiveState.watch(path, onState)` keeps one such socket open (reconnecting after
// a drop, not after a refusal 4xxx or the server's close 1000 at a final state) and
// returns `{dispose()}`. Markup: an element with `data-live-state="<ws path>"` and
// `data-refresh-url` has the element `data-refresh-target` names (whose `data-state`
// says what it shows) swapped for the URL's answer (htmx) when the state differs.
(function () {
  "use strict";

  function watch(path, onState) {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    let socket = null;
    let closed = false;
    let retry = 0;
    function connect() {
      socket = new WebSocket(`${scheme}//${location.host}${path}`);
      socket.addEventListener("open", () => { retry = 0; });
      socket.addEventListener("message", (event) => {
        const message = JSON.parse(event.data);
        if (message.type === "state") onState(message);
      });
      socket.addEventListener("close", (event) => {
        if (closed || event.code === 1000 || (event.code >= 4000 && event.code < 5000)) return;
        setTimeout(() => { if (!closed) connect(); }, Math.min(15000, 500 * 2 ** retry++));
      });
    }
    connect();
    return { dispose() { closed = true; socket?.close(); } };
  }

  // One refresh at a time, each aimed at the element present when it starts: htmx
  // would queue a second request on the element the first one replaces.
  let refreshing = Promise.resolve();
  function refresh(url, targetId) {
    refreshing = refreshing.then(() => {
      const target = document.getElementById(targetId);
      if (target && window.htmx) return window.htmx.ajax("GET", url, { target, swap: "outerHTML" });
    }).catch(() => {});
    return refreshing;
  }

  window.BerthLiveState = { watch, refresh };

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("[data-live-state]").forEach((el) => {
      watch(el.dataset.liveState, (message) => {
        const shown = document.getElementById(el.dataset.refreshTarget);
        if (!shown || shown.dataset.state !== message.state) {
          refresh(el.dataset.refreshUrl, el.dataset.refreshTarget);
        }
      });
    });
  });
})();
