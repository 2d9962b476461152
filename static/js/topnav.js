// The top bar on a narrow screen: the team's links and the sign-out fold behind a Menu
// button (aria-expanded says which), opened with a click, Enter or Space, closed again
// with it or Escape (focus goes back to the button). Without this script nothing folds.
(function () {
  "use strict";
  function start() {
    const header = document.querySelector("header.top");
    const button = header && header.querySelector(".menu-button");
    if (!button) return;
    header.classList.add("collapsible");
    button.hidden = false;
    function set(open) {
      button.setAttribute("aria-expanded", String(open));
      header.classList.toggle("open", open);
    }
    button.addEventListener("click", () => set(button.getAttribute("aria-expanded") !== "true"));
    header.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && button.getAttribute("aria-expanded") === "true") {
        set(false);
        button.focus();
      }
    });
    // Back on a wide screen everything shows anyway: start folded next time.
    const narrow = window.matchMedia("(max-width: 720px)");
    narrow.addEventListener("change", () => { if (!narrow.matches) set(false); });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
