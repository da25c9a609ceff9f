// The run page's log view follows new lines while it is scrolled to the bottom (htmx appends them;
// it cannot tell whether the reader scrolled up to read earlier lines).
(function () {
  'use strict';
  let follow = true;

  function box() {
    return document.getElementById('log-lines');
  }

  function atBottom(el) {
    return el.scrollHeight - el.scrollTop - el.clientHeight < 24;
  }

  document.addEventListener('scroll', function (event) {
    if (event.target === box()) follow = atBottom(event.target);
  }, true);

  // A long live run would grow the page without end: keep the newest lines (the download has all).
  const KEEP = 5000;

  document.addEventListener('htmx:afterSettle', function () {
    const el = box();
    if (!el) return;
    const lines = el.getElementsByClassName('log-line');
    for (let extra = lines.length - KEEP; extra > 0; extra--) lines[0].remove();
    if (follow) el.scrollTop = el.scrollHeight;
  });

  const el = box();
  if (el) el.scrollTop = el.scrollHeight;
})();
