// Marks the page as stale while its refreshes fail (scheduler restarting or unreachable), so
// nobody reads old numbers as current; the next good refresh clears the mark.
(function () {
  "use strict";
  function stale(on) { document.body.classList.toggle("stale", on); }
  document.addEventListener("htmx:sendError", function () { stale(true); });
  document.addEventListener("htmx:responseError", function () { stale(true); });
  document.addEventListener("htmx:afterSwap", function () { stale(false); });

  // The tables' sticky headings sit just below the sticky header, however many rows the header
  // wraps into (its counts and trend plots wrap on narrow windows).
  function headerHeight() {
    var header = document.getElementById("header");
    if (header) {
      document.documentElement.style.setProperty("--header-height", header.offsetHeight + "px");
    }
  }
  headerHeight();
  window.addEventListener("resize", headerHeight);
  document.addEventListener("htmx:afterSettle", headerHeight);
})();
