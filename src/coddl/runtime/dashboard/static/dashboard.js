// Keeps a dashboard page live: every few seconds (body's data-refresh) it fetches the same page and
// swaps in its <main>, so nothing reloads and the scroll position stays. Times are shown in the
// browser's own time zone.
(function () {
  "use strict";
  var period = 1000 * (parseInt(document.body.dataset.refresh, 10) || 5);

  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var d = new Date(t.dateTime);
      if (!isNaN(d)) { t.title = d.toLocaleString(); }
    });
  }

  function refresh() {
    if (document.hidden) { return; }
    fetch(location.href, { credentials: "same-origin" }).then(function (r) {
      if (r.redirected) { location.assign(r.url); return null; }  // logged out elsewhere
      return r.ok || r.status === 403 || r.status === 404 ? r.text() : null;
    }).then(function (html) {
      if (!html) { return; }
      var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("main");
      var main = document.querySelector("main");
      if (!fresh || !main) { return; }
      var logs = main.querySelector("#logs");
      var atBottom = logs && logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
      main.replaceWith(fresh);
      localTimes(fresh);
      var newLogs = fresh.querySelector("#logs");
      if (newLogs && (atBottom || !logs)) { newLogs.scrollTop = newLogs.scrollHeight; }
      document.body.dataset.refreshed = String(Date.now());
    }).catch(function () { /* the server may be restarting: try again next time */ });
  }

  localTimes(document);
  var logs = document.querySelector("#logs");
  if (logs) { logs.scrollTop = logs.scrollHeight; }
  setInterval(refresh, period);
})();
