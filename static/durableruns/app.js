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
// 4. Polls (an `every` trigger) never overlap and never run back to back: a poll starts
//    no sooner than half its interval after the previous answer, or as long after it as
//    the server asked (X-Poll-Interval, seconds: it is busy, web/backoff.py). A hidden
//    tab polls at most every 30 s. A poll too early is dropped; the next tick tries again.
(function () {
  "use strict";
  var HIDDEN_GAP = 30000;
  var polls = {};  // by element id (a swap may replace the element): {busy, nextAt}
  function interval(elt) {
    var found = /every\s+(\d+(?:\.\d+)?)(ms|s)/.exec(elt.getAttribute("hx-trigger") || "");
    if (!found) { return null; }
    return parseFloat(found[1]) * (found[2] === "s" ? 1000 : 1);
  }
  function pollOf(event) {
    var elt = event.detail.elt;
    if (!elt || !elt.id || !event.detail.requestConfig
        || event.detail.requestConfig.verb !== "get" || interval(elt) === null) { return null; }
    return polls[elt.id] || (polls[elt.id] = {busy: false, nextAt: 0, startedAt: 0});
  }
  document.addEventListener("htmx:beforeRequest", function (event) {
    var poll = pollOf(event);
    if (!poll) { return; }
    var now = Date.now();
    var tooSoon = now < poll.nextAt || (document.hidden && now < poll.startedAt + HIDDEN_GAP);
    var overlapping = poll.busy && now < poll.startedAt + 60000;  // a lost answer frees it
    if (overlapping || tooSoon) { event.preventDefault(); return; }
    poll.busy = true;
    poll.startedAt = now;
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var poll = pollOf(event);
    if (!poll) { return; }
    var told = parseFloat(event.detail.xhr && event.detail.xhr.getResponseHeader("X-Poll-Interval"));
    var gap = told > 0 ? told * 1000 : interval(event.detail.elt) / 2;
    poll.busy = false;
    poll.nextAt = Date.now() + gap;
  });
})();
// 5. An amount in cents is shown in currency units as the reviewer types it, formatted
//    as the server formats it ("1,234.56"), from the digits themselves (no float: a
//    large amount stays exact). Not a whole number of cents: nothing is shown (the
//    server says why when the form is sent).
(function () {
  "use strict";
  function units(typed) {
    var found = /^\s*(-?)(\d+)\s*$/.exec(typed);
    if (!found) { return null; }
    var digits = found[2].replace(/^0+(?=\d)/, "");
    while (digits.length < 3) { digits = "0" + digits; }
    var integer = digits.slice(0, -2);
    // Thousands in one left-to-right pass (a lookahead regex would be quadratic).
    var head = integer.length % 3 || 3;
    var whole = integer.slice(0, head);
    for (var i = head; i < integer.length; i += 3) { whole += "," + integer.slice(i, i + 3); }
    var sign = found[1] && /[1-9]/.test(digits) ? "-" : "";
    return sign + whole + "." + digits.slice(-2);
  }
  document.addEventListener("input", function (event) {
    var field = event.target;
    if (!field.id) { return; }
    var hint = document.querySelector('[data-cents-of="' + field.id + '"]');
    if (!hint) { return; }
    var shown = units(field.value);
    hint.textContent = shown === null ? "" : "Shown now: " + shown + " (in currency units).";
  });
})();
