// /worker/start#token=<token>[&worker=<id>]: exchange the token for the worker cookie, then
// open the worker page. The fragment never reaches a server or a log.
const params = new URLSearchParams(location.hash.slice(1));
history.replaceState(null, '', location.pathname);  // drop the token from the address bar and history
const status = document.getElementById('start-status');
const csrf = JSON.parse(document.body.getAttribute('hx-headers'))['x-csrftoken'];

// A stable worker id (given by `peermr worker` per browser profile) keeps the IndexedDB blobs across restarts.
if (params.get('worker')) sessionStorage.setItem('peermr-worker-id', params.get('worker'));

const response = await fetch('/worker/session', {
  method: 'POST',
  headers: {'content-type': 'application/json', 'x-csrftoken': csrf},
  body: JSON.stringify({token: params.get('token') || ''}),
});
if (response.ok) {
  location.replace('/worker');
} else {
  const detail = await response.json().catch(() => ({}));
  status.textContent = `Could not join: ${detail.detail || response.statusText}`;
  status.setAttribute('role', 'alert');
}
