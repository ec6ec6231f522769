// trainyard dashboard: reloads the page's live content every 2 s without
// a page reload, and fetches a job's logs on demand.
"use strict";

(function () {
  const live = document.getElementById("live");
  const status = document.getElementById("status");
  const every = Number(live && live.dataset.live) || 2000;
  let busy = false;

  function partialURL() {
    const u = new URL(window.location.href);
    u.searchParams.set("partial", "1");
    return u.toString();
  }

  function setStatus(text, ok) {
    if (!status) return;
    status.textContent = text;
    status.classList.toggle("down", !ok);
  }

  async function refresh() {
    // Leave the content alone while the user works a form in it.
    const active = document.activeElement;
    if (busy || document.hidden || (active && live.contains(active) && active.matches("select, input"))) return;
    busy = true;
    try {
      const res = await fetch(partialURL(), { cache: "no-store", credentials: "same-origin" });
      const html = await res.text();
      if (res.ok || res.status === 404 || res.status === 403) {
        live.innerHTML = html;
        live.dataset.updated = String(Date.now());
        setStatus("live · " + new Date().toLocaleTimeString(), res.ok);
      } else {
        setStatus("update failed (" + res.status + ")", false);
      }
    } catch (e) {
      setStatus("dashboard unreachable", false);
    } finally {
      busy = false;
    }
  }

  if (live) setInterval(refresh, every);

  document.addEventListener("change", (ev) => {
    const t = ev.target;
    if (t.matches && t.matches("select[data-autosubmit]") && t.form) t.form.submit();
  });

  const button = document.getElementById("fetch-logs");
  const out = document.getElementById("logs");
  const follow = document.getElementById("follow-logs");
  let following = null;

  async function fetchLogs() {
    if (!button || !out) return;
    button.disabled = true;
    try {
      const res = await fetch(button.dataset.url, { method: "POST", headers: { "X-Trainyard": "1" }, credentials: "same-origin" });
      out.textContent = await res.text();
      out.classList.toggle("error", !res.ok);
      out.classList.remove("empty");
    } catch (e) {
      out.textContent = "cannot reach the dashboard: " + e;
      out.classList.add("error");
    } finally {
      button.disabled = false;
    }
  }

  if (button) button.addEventListener("click", fetchLogs);
  if (follow) {
    follow.addEventListener("change", () => {
      if (following) clearInterval(following);
      following = follow.checked ? setInterval(fetchLogs, 5000) : null;
      if (follow.checked) fetchLogs();
    });
  }
})();
