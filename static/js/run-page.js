// The run page's log view. Follow mode (the "Follow new lines" box) keeps the newest line in view
// as htmx appends lines; scrolling up to read earlier lines turns it off, and a link to one line
// (#L<id>) opens with it off, that line in view. Changing a filter shows the log with it.
(function () {
  'use strict';
  const KEEP = 5000;  // lines kept while following a long live run (the download has all)

  function box() {
    return document.getElementById('log-lines');
  }

  function followBox() {
    return document.getElementById('log-follow');
  }

  function atBottom(el) {
    return el.scrollHeight - el.scrollTop - el.clientHeight < 24;
  }

  function following() {
    const toggle = followBox();
    return !toggle || toggle.checked;
  }

  function toBottom() {
    const el = box();
    if (el) el.scrollTop = el.scrollHeight;
  }

  document.addEventListener('scroll', function (event) {
    const toggle = followBox();
    if (event.target === box() && toggle) toggle.checked = atBottom(event.target);
  }, true);

  document.addEventListener('change', function (event) {
    if (event.target === followBox()) {
      if (event.target.checked) toBottom();
    } else if (event.target.closest && event.target.closest('#log-filters') && event.target.tagName === 'SELECT') {
      event.target.form.requestSubmit();
    }
  });

  document.addEventListener('htmx:afterSettle', function () {
    const el = box();
    if (!el || !following()) return;
    const lines = el.getElementsByClassName('log-line');
    for (let extra = lines.length - KEEP; extra > 0; extra--) lines[0].remove();
    toBottom();
  });

  const target = /^#L\d+$/.test(location.hash) && document.getElementById(location.hash.slice(1));
  if (target) {
    followBox().checked = false;
    target.scrollIntoView({block: 'center'});
  } else {
    toBottom();
  }
})();
