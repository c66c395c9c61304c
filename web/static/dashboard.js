// Marks the page as stale while its refreshes fail (scheduler restarting or unreachable), so
// nobody reads old numbers as current; the next good refresh clears the mark.
(function () {
  "use strict";
  function stale(on) { document.body.classList.toggle("stale", on); }
  document.addEventListener("htmx:sendError", function () { stale(true); });
  document.addEventListener("htmx:responseError", function () { stale(true); });
  document.addEventListener("htmx:afterSwap", function () { stale(false); });
})();
