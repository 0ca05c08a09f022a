/* The delayed-jobs admin pages: the only script they run, loaded from a file so that a
   Content-Security-Policy without 'unsafe-inline' allows it. */
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // Job lists: the header checkbox selects or clears every job of the page.
  var all = document.getElementById("select-all");
  if (!all) return;
  all.addEventListener("change", function () {
    document.querySelectorAll("#result_list input.action-select").forEach(function (box) {
      box.checked = all.checked;
    });
  });
});
