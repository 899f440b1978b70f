// Quaymaster web UI: live pages and confirmations. No framework, no build step.
//
// A <main> with data-live-kinds follows /ui/live (server-sent events from the watch stream).
// A "change" event schedules one refetch of the page's main block (X-QM-Fragment: main),
// at most once a second; nothing is refetched while the operator is typing in a form of it.
// A hidden tab closes its stream and reopens it, from the last version it saw, when shown.
// A lost stream says so in #live-status and resumes (the browser resends Last-Event-ID).
(function () {
  "use strict";
  const main = document.getElementById("main");
  const banner = document.getElementById("live-status");
  const DEBOUNCE_MS = 1000;

  function say(text) {
    if (!banner) return;
    banner.textContent = text || "";
    banner.hidden = !text;
  }

  function busy() {
    const el = document.activeElement;
    return el && main.contains(el) && /^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName) && el.value;
  }

  let source = null;
  let lastId = "";
  let timer = null;
  let pending = false;
  let refreshing = false;

  async function refresh() {
    timer = null;
    if (busy()) { timer = setTimeout(refresh, DEBOUNCE_MS); return; }
    if (refreshing) { pending = true; return; }
    refreshing = true;
    try {
      const resp = await fetch(location.pathname + location.search, {
        headers: { "X-QM-Fragment": "main" }, credentials: "same-origin", cache: "no-store",
      });
      if (resp.status === 401) { say("Your session has ended: sign in again."); stop(); return; }
      if (resp.ok) {
        main.innerHTML = await resp.text();
        main.dataset.refreshed = String(Date.now());
        document.dispatchEvent(new CustomEvent("qm:refreshed"));
      }
    } catch (e) {
      say("Could not refresh the page: " + e);
    } finally {
      refreshing = false;
      if (pending) { pending = false; schedule(); }
    }
  }

  function schedule() {
    if (!timer) timer = setTimeout(refresh, DEBOUNCE_MS);
  }

  function stop() {
    if (source) { source.close(); source = null; }
  }

  function start() {
    if (!main || !main.dataset.liveKinds || source) return;
    const params = new URLSearchParams({ kinds: main.dataset.liveKinds });
    if (main.dataset.liveNs) params.set("ns", main.dataset.liveNs);
    const from = lastId || main.dataset.liveRv || "";
    if (from) params.set("rv", from);
    source = new EventSource("/ui/live?" + params.toString());
    main.dataset.live = "connecting";
    let reconnecting = false;
    source.addEventListener("open", function (ev) {
      main.dataset.live = "open";
      if (ev.lastEventId) lastId = ev.lastEventId;
      if (reconnecting) { say(""); schedule(); }
      reconnecting = false;
    });
    source.addEventListener("change", function (ev) {
      if (ev.lastEventId) lastId = ev.lastEventId;
      schedule();
    });
    source.addEventListener("bookmark", function (ev) {
      if (ev.lastEventId) lastId = ev.lastEventId;
    });
    source.addEventListener("reset", function () { lastId = ""; schedule(); });
    source.addEventListener("forbidden", function (ev) {
      say("Live updates are off: you may not watch " + JSON.parse(ev.data).kind + ".");
    });
    source.addEventListener("signedout", function () {
      say("Your session has ended: sign in again."); stop();
    });
    source.onerror = function () {
      main.dataset.live = "lost";
      reconnecting = true;
      say("Live updates lost; reconnecting from version " + (lastId || "now") + "…");
      if (source && source.readyState === EventSource.CLOSED) {
        source = null;
        setTimeout(start, 2000);
      }
    };
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      stop();
      if (main) main.dataset.live = "paused";
    } else if (main && main.dataset.liveKinds) {
      start();
      schedule();
    }
  });

  document.addEventListener("submit", function (ev) {
    const form = ev.target;
    if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      ev.preventDefault();
    }
  });

  if (!document.hidden) start();
})();
