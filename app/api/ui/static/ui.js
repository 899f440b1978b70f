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

  // The operator is busy with a form of the page: focus is in one, or a field differs from
  // what the page rendered. A refresh would throw that away, so it waits.
  function busy() {
    const el = document.activeElement;
    if (el && main.contains(el) && el.closest("form")) return true;
    for (const f of main.querySelectorAll("input, select, textarea")) {
      if (f.type === "hidden") continue;
      if (f.type === "checkbox" || f.type === "radio") {
        if (f.checked !== f.defaultChecked) return true;
      } else if (f.tagName === "SELECT") {
        // With no option marked selected, a single select shows its first one.
        const marked = Array.from(f.options).findIndex(function (o) { return o.defaultSelected; });
        if (f.multiple) {
          for (const o of f.options) if (o.selected !== o.defaultSelected) return true;
        } else if (f.selectedIndex !== (marked < 0 ? 0 : marked)) {
          return true;
        }
      } else if (f.value !== f.defaultValue) {
        return true;
      }
    }
    return false;
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

// Log follow (pods/logs.html): the "Follow" button opens the server-sent events of
// /ui/pods/<ns>/<name>/logs/follow and appends each "line" event to <pre id="log-lines">,
// keeping the last MAX_LINES. A hidden tab closes the stream; shown again, it reopens from
// the last lines (the log API has no sinceTime), replacing what the page held. "end" and
// "error" events say why the stream stopped.
(function () {
  "use strict";
  const button = document.getElementById("log-follow");
  const pre = document.getElementById("log-lines");
  const state = document.getElementById("log-state");
  if (!button || !pre) return;
  const MAX_LINES = 5000;
  let source = null;
  let following = false;
  let lines = [];
  let drawn = true;

  function tell(text) { if (state) state.textContent = text; }

  function draw() {
    drawn = true;
    if (lines.length > MAX_LINES) lines = lines.slice(lines.length - MAX_LINES);
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.textContent = lines.join("\n");
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  }

  function later() {
    if (drawn) { drawn = false; window.requestAnimationFrame(draw); }
  }

  function close() { if (source) { source.close(); source = null; } }

  function open() {
    close();
    lines = [];
    source = new EventSource(button.dataset.url + "&tail=" + encodeURIComponent(button.dataset.tail || "100"));
    tell("Following (the last " + (button.dataset.tail || "100") + " lines, then new ones)…");
    source.addEventListener("line", function (ev) { lines.push(JSON.parse(ev.data)); later(); });
    source.addEventListener("end", function (ev) { stopFollowing(JSON.parse(ev.data)); });
    source.addEventListener("error", function (ev) {
      if (ev.data) { stopFollowing("The log cannot be followed: " + JSON.parse(ev.data)); return; }
      close();  // the connection broke: reopen rather than let the browser resend the tail
      if (following && !document.hidden) {
        tell("The log stream was lost; reconnecting…");
        setTimeout(function () { if (following && !source && !document.hidden) open(); }, 2000);
      }
    });
  }

  function stopFollowing(why) {
    following = false;
    close();
    button.textContent = "Follow";
    button.setAttribute("aria-pressed", "false");
    tell(why);
  }

  button.addEventListener("click", function () {
    if (following) { stopFollowing("Stopped following."); return; }
    following = true;
    button.textContent = "Stop following";
    button.setAttribute("aria-pressed", "true");
    open();
  });

  document.addEventListener("visibilitychange", function () {
    if (!following) return;
    if (document.hidden) { close(); tell("Paused while the tab is hidden."); } else { open(); }
  });
})();
