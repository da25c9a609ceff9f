// A table or tab row wider than its card scrolls inside it (app.css); one that holds nothing a
// keyboard can reach gets a tab stop here, so keyboard users can scroll it too. Checked when the
// page loads, when the window changes size and after htmx swaps content in.
(function () {
  'use strict';
  const BOXES = '.table, .table-scroll, .tabs, .log';

  function mark() {
    for (const box of document.querySelectorAll(BOXES)) {
      if (box.hasAttribute('tabindex')) continue;
      const scrolls = box.scrollWidth > box.clientWidth + 1 || box.scrollHeight > box.clientHeight + 1;
      const style = getComputedStyle(box);
      if (scrolls && (style.overflowX === 'auto' || style.overflowY === 'auto')) box.setAttribute('tabindex', '0');
    }
  }

  let pending = 0;
  function soon() {
    cancelAnimationFrame(pending);
    pending = requestAnimationFrame(mark);
  }

  mark();
  window.addEventListener('resize', soon);
  document.addEventListener('htmx:afterSettle', soon);
})();
