// Storage page: upload progress for the htmx upload form (the form also works without this script).
const form = document.getElementById("upload-form");
const box = form && document.getElementById(form.dataset.uploadProgress);

if (form && box) {
  const bar = box.querySelector("progress");
  const text = box.querySelector("[data-progress-text]");
  const button = form.querySelector("button[type=submit]");

  // htmx reports the request body's progress, then the (small) response's: keep to the larger total.
  let uploadTotal = 0;

  form.addEventListener("htmx:beforeRequest", (event) => {
    // Refuse at once what the appliance would refuse only after the browser started sending it.
    const file = form.querySelector("input[type=file]").files[0];
    const limit = Number(form.dataset.maxBytes);
    if (file && limit && file.size > limit) {
      event.preventDefault();
      box.hidden = false;
      bar.value = 0;
      text.textContent = `${file.name} is larger than the limit of ${(limit / 1048576).toFixed(1)} MiB.`;
      return;
    }
    uploadTotal = 0;
    bar.value = 0;
    text.textContent = "starting…";
    box.hidden = false;
    button.disabled = true;
  });
  form.addEventListener("htmx:xhr:progress", (event) => {
    const { loaded, total, lengthComputable } = event.detail;
    if (!lengthComputable || !total || total < uploadTotal) return;
    uploadTotal = total;
    const percent = Math.min(100, Math.floor((loaded / total) * 100));
    bar.value = percent;
    const size = `${(total / 1048576).toFixed(1)} MiB`;
    text.textContent = percent < 100 ? `${percent}% of ${size}` : `${size} sent; storing…`;
  });
  form.addEventListener("htmx:afterRequest", () => {
    box.hidden = true;
    button.disabled = false;
    form.reset();
  });
}
