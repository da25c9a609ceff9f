// The job editor: CodeMirror 5 on the script's <textarea> (line numbers, JavaScript highlighting,
// Tab indents), the line of a refused script marked and scrolled to, and the run <dialog>.
// Without this file (or without JavaScript) the textarea and the run page still work.
(function () {
  'use strict';

  const form = document.getElementById('job-form');
  const textarea = document.getElementById('script');
  const status = document.getElementById('editor-status');
  let dirty = false;
  let submitting = false;

  function markDirty() {
    if (!dirty) {
      dirty = true;
      if (status) status.textContent = 'Unsaved changes';
    }
  }

  function indentOrInsert(cm) {
    if (cm.somethingSelected()) {
      cm.indentSelection('add');
    } else {
      const unit = cm.getOption('indentUnit');
      cm.replaceSelection(' '.repeat(unit), 'end', '+input');
    }
  }

  function leaveEditor(cm) {
    // Esc gives keyboard users a way out of the editor: focus the next control (Save).
    cm.getInputField().blur();
    const save = document.getElementById('save-job');
    if (save) save.focus();
  }

  function markError(cm) {
    const line = parseInt(textarea.dataset.errorLine || '', 10);
    if (!line) return;
    const column = Math.max(parseInt(textarea.dataset.errorColumn || '1', 10) || 1, 1);
    const index = Math.min(line, cm.lineCount()) - 1;
    const handle = cm.addLineClass(index, 'background', 'cm-error-line');
    cm.addLineClass(index, 'gutter', 'cm-error-gutter');
    cm.getWrapperElement().dataset.errorLine = String(index + 1);
    cm.setCursor({ line: index, ch: column - 1 });
    cm.scrollIntoView({ line: index, ch: column - 1 }, 120);
    cm.focus();
    // The mark goes once that line is edited.
    cm.on('change', function clear(_, change) {
      const info = cm.lineInfo(handle);
      if (!info || (change.from.line <= info.line && change.to.line >= info.line)) {
        cm.removeLineClass(handle, 'background', 'cm-error-line');
        cm.removeLineClass(handle, 'gutter', 'cm-error-gutter');
        delete cm.getWrapperElement().dataset.errorLine;
        cm.off('change', clear);
      }
    });
  }

  if (form && textarea && typeof window.CodeMirror === 'function') {
    const cm = window.CodeMirror.fromTextArea(textarea, {
      mode: 'javascript',
      lineNumbers: true,
      indentUnit: 2,
      tabSize: 2,
      indentWithTabs: false,
      smartIndent: true,
      matchBrackets: true,
      viewportMargin: Infinity,
      // A phone wraps long lines instead of scrolling the editor sideways.
      lineWrapping: window.matchMedia('(max-width: 700px)').matches,
      extraKeys: {
        Tab: indentOrInsert,
        'Shift-Tab': 'indentLess',
        Esc: leaveEditor,
      },
      screenReaderLabel: 'Script',
    });
    textarea.form.addEventListener('submit', function () {
      cm.save();
    });
    cm.on('change', markDirty);
    markError(cm);
    window.jobEditor = cm; // for tests and the browser console
  } else if (textarea) {
    textarea.addEventListener('input', markDirty);
  }

  if (form) {
    // A refused script is not saved yet: leaving the page would lose it.
    if (document.getElementById('script-error')) markDirty();
    form.addEventListener('input', markDirty);
    form.addEventListener('submit', function () {
      submitting = true;
    });
    window.addEventListener('beforeunload', function (event) {
      if (dirty && !submitting) {
        event.preventDefault();
        event.returnValue = '';
      }
    });
  }

  // The run dialog: the Run link opens it instead of the run page.
  const opener = document.getElementById('run-open');
  const dialog = opener && document.getElementById(opener.dataset.dialog || '');
  if (opener && dialog && typeof dialog.showModal === 'function') {
    opener.addEventListener('click', function (event) {
      event.preventDefault();
      const unsaved = document.getElementById('run-unsaved');
      if (unsaved) unsaved.hidden = !dirty;
      dialog.showModal();
      const first = dialog.querySelector('input');
      if (first) first.focus();
    });
  }
  document.addEventListener('click', function (event) {
    const close = event.target.closest('[data-close-dialog]');
    const open = close && close.closest('dialog[open]');
    if (open) {
      event.preventDefault();
      open.close();
    }
  });
  // A run that started navigates away: no "unsaved changes" question for that.
  document.addEventListener('htmx:beforeRequest', function (event) {
    if (event.target && event.target.id === 'run-form') submitting = true;
  });
  document.addEventListener('htmx:afterRequest', function (event) {
    if (event.target && event.target.id === 'run-form' && !event.detail.xhr.getResponseHeader('HX-Redirect')) {
      submitting = false;
    }
  });
})();
