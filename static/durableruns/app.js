// Site-wide htmx behaviour, served from the project (CSP: script-src 'self').
// 1. Validation answers (400, 409, 422) are swapped with their real status: the
//    server renders the form or card with the error, htmx shows it (responseHandling
//    in the htmx-config meta tag of _base.html does the swapping; nothing here).
// 2. Focus survives a swap: the element that had focus (by id) gets it back, or
//    failing that the first alert in the swapped content, so keyboard and screen
//    reader users are not thrown back to the top of the page.
(function () {
  "use strict";
  var focusedId = null;
  var targetId = null;
  document.addEventListener("htmx:beforeSwap", function (event) {
    var active = document.activeElement;
    focusedId = active && active !== document.body && active.id ? active.id : null;
    // An outerHTML swap replaces the target: find its successor by id afterwards.
    targetId = event.detail.target && event.detail.target.id ? event.detail.target.id : null;
  });
  document.addEventListener("htmx:afterSettle", function (event) {
    if (event.detail.requestConfig && event.detail.requestConfig.verb === "get"
        && event.detail.elt && event.detail.elt.hasAttribute("hx-trigger")) {
      return; // a poll: leave focus where the person put it
    }
    var swapped = targetId ? document.getElementById(targetId) : null;
    var alert = swapped ? swapped.querySelector("[role=alert]") : null;
    var again = focusedId ? document.getElementById(focusedId) : null;
    var target = alert || again;
    if (target && document.activeElement !== target) {
      if (!target.hasAttribute("tabindex") && !/^(INPUT|SELECT|TEXTAREA|BUTTON|A)$/.test(target.tagName)) {
        target.setAttribute("tabindex", "-1");
      }
      target.focus();
    }
  });
})();
// 3. A running run's time budget counts on the page: an unchanged poll answers 204 (no
//    body) so the server never re-renders just because the clock moved. The counter
//    restarts from the server's figure whenever a render brings a new one.
(function () {
  "use strict";
  function text(value) {  // the `seconds` template filter, in the browser
    if (value < 1) { return Math.round(value * 1000) + " ms"; }
    if (value < 60) { return value.toFixed(1) + " s"; }
    if (value < 3600) { return Math.floor(value / 60) + " min " + Math.floor(value % 60) + " s"; }
    return Math.floor(value / 3600) + " h " + Math.floor(value % 3600 / 60) + " min";
  }
  setInterval(function () {
    document.querySelectorAll("[data-counted]").forEach(function (el) {
      if (el.dataset.base !== el.dataset.counted) {
        el.dataset.base = el.dataset.counted;
        el.dataset.since = String(Date.now());
      }
      var counted = parseFloat(el.dataset.counted) + (Date.now() - Number(el.dataset.since)) / 1000;
      el.textContent = text(counted) + " of " + el.dataset.of;
    });
  }, 1000);
})();
