// Browsers give WebGPU and crypto.subtle only to secure contexts (https://, or this computer itself):
// opened over http:// from another computer, the page says so rather than quietly working less well.
if (!window.isSecureContext) document.getElementById('insecure-context').hidden = false;
