// The workspace page's live activity feed: rows arrive over the team's activity
// WebSocket (after the last one the page was rendered with) and go on top, newest
// first, keeping the list short. Text only: nothing from the server becomes markup.
// Each row is also told to the page as a `berth:activity` event: the editor asks then
// what a commit did to its open files (watch.js).
(() => {
  const section = document.querySelector("[data-activity-ws]");
  if (!section || !("WebSocket" in window)) return;
  const list = section.querySelector(".feed");
  const KEEP = 30;
  let url = section.dataset.activityWs;
  let delay = 500;

  function row(entry) {
    const li = document.createElement("li");
    li.className = entry.kind;
    const who = document.createElement("span");
    who.className = "who";
    if (entry.kind === "agent") {
      const mark = document.createElement("span");
      mark.className = "mark";
      mark.title = "an agent's token";
      mark.textContent = "⚙";
      who.append(mark);
    }
    who.append(entry.who);
    // In words; the code stays on the row for whoever needs it (title, data-verb).
    // A link to its target's page when it has one (`url`: absolute, under APP_URL;
    // only ever http(s), whatever a row says).
    const link = /^https?:\/\//.test(entry.url || "") ? entry.url : "";
    const verb = document.createElement(link ? "a" : "span");
    if (link) verb.href = link;
    verb.className = "verb";
    verb.dataset.verb = entry.verb;
    verb.title = entry.verb;
    verb.textContent = entry.words || entry.verb;
    const time = document.createElement("time");
    time.dateTime = entry.at;
    time.textContent = entry.at.slice(11, 16);
    li.append(who, " ", verb, " ", time);
    return li;
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}${url}`);
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data);
      if (message.type !== "entries") return;
      list.querySelector(".none")?.remove();
      for (const entry of message.entries) {
        list.prepend(row(entry));
        url = url.replace(/after=\d+/, `after=${entry.id}`);  // a reconnect resumes here
        document.dispatchEvent(new CustomEvent("berth:activity", { detail: entry }));
      }
      while (list.children.length > KEEP) list.lastElementChild.remove();
      delay = 500;
    };
    socket.onclose = (event) => {
      if (event.code === 4404) return;  // not a member: nothing to follow
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    };
  }
  connect();
})();
