// A Copy button beside every secret or link shown once (.secret: one-time passwords, API tokens,
// enrolment links, CORS rules), also in fragments htmx swaps in. It says "Copied" when it worked.
(function () {
  'use strict';

  async function copy(text) {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return;
    }
    // Plain-http appliances have no clipboard API: copy a selection instead.
    const area = document.createElement('textarea');
    area.value = text;
    area.setAttribute('readonly', '');
    area.style.position = 'fixed';
    area.style.opacity = '0';
    document.body.appendChild(area);
    area.select();
    const done = document.execCommand('copy');
    area.remove();
    if (!done) throw new Error('copy refused');
  }

  function addButtons() {
    for (const secret of document.querySelectorAll('.secret:not([data-copy])')) {
      secret.dataset.copy = 'added';
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'button small copy-button';
      button.textContent = 'Copy';
      button.addEventListener('click', async function () {
        try {
          await copy(secret.textContent.trim());
          button.textContent = 'Copied';
        } catch {
          button.textContent = 'Select and copy it yourself';
        }
        setTimeout(function () { button.textContent = 'Copy'; }, 2500);
      });
      secret.insertAdjacentElement('afterend', button);
    }
  }

  addButtons();
  document.addEventListener('htmx:afterSettle', addButtons);
})();
