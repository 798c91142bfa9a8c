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
