// Live regions are morphed (idiomorph) rather than replaced: unchanged nodes stay,
// so a text selection, focus and scroll positions survive a poll. Two things the
// server cannot know are kept as the operator left them: which <details> are open,
// and the step bodies loaded on opening them.
(function () {
  "use strict";
  const callbacks = Idiomorph.defaults.callbacks;
  callbacks.beforeAttributeUpdated = function (name, node, mutation) {
    return !(name === "open" && node.tagName === "DETAILS");
  };
  callbacks.beforeNodeMorphed = function (oldNode) {
    return !(oldNode.classList && oldNode.classList.contains("step-body"));
  };

  // A changed poll of a run page may send only what changed (web/live_rows.py), as
  // out-of-band swaps that leave the region's own attributes as they were: the headers
  // of its next poll then come in #run-live-next.
  document.addEventListener("htmx:configRequest", function (event) {
    if (!event.detail.elt || event.detail.elt.id !== "run-live") return;
    const next = document.getElementById("run-live-next");
    if (next && next.dataset.headers) {
      Object.assign(event.detail.headers, JSON.parse(next.dataset.headers));
    }
  });

  // Timeline bars are drawn in seconds since the run's start (web/timeline.py), in a
  // viewBox as long as the axis: when a poll brings a longer axis, every row already
  // on the page is rescaled here rather than sent again.
  function rescaleBars() {
    const head = document.getElementById("timeline-head");
    if (!head || !head.dataset.axisSeconds) return;
    const box = "0 0 " + head.dataset.axisSeconds + " 12";
    document.querySelectorAll("#run-live svg.bar[viewBox]").forEach(function (bar) {
      if (bar.getAttribute("viewBox") !== box) bar.setAttribute("viewBox", box);
    });
  }
  document.addEventListener("htmx:afterSwap", rescaleBars);
  document.addEventListener("htmx:afterSettle", rescaleBars);

  // Copy buttons: <button class="copy" data-copy="text">.
  document.addEventListener("click", function (event) {
    const button = event.target.closest("button.copy[data-copy]");
    if (!button) return;
    const done = function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(button.dataset.copy).then(done);
    } else {
      const range = document.createRange();
      range.selectNodeContents(button.previousElementSibling || button);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
    }
  });

  // Bulk actions: "… selected" buttons need a selection; a header box selects all.
  function syncBulk() {
    const ticked = document.querySelectorAll("input[name=run][form=bulk]:checked").length;
    document.querySelectorAll("button[data-needs-selection]").forEach(function (button) {
      button.disabled = ticked === 0;
    });
    const count = document.getElementById("selected-count");
    if (count) count.textContent = ticked ? ticked + " selected" : "";
  }
  document.addEventListener("change", function (event) {
    if (event.target.id === "select-all") {
      document.querySelectorAll("input[name=run][form=bulk]").forEach(function (box) {
        box.checked = event.target.checked;
      });
    }
    if (event.target.matches("input[name=run][form=bulk], #select-all")) syncBulk();
  });
  document.addEventListener("DOMContentLoaded", syncBulk);
  document.addEventListener("htmx:afterSettle", syncBulk);
})();
