"""Cloud Data in a real browser: the page's form, and a Web Worker on the appliance's origin using
presigned URLs on an S3-compatible server (moto), which only works once the page has set the bucket's CORS.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from appliance.cloud import service
from appliance.cloud.service import CloudStorage
from tests.s3_server import REGION
from tests.support import Appliance

pytestmark = pytest.mark.e2e
EMAIL = "cora@example.com"
PASSWORD = "cloud-browser-1"
KEY_ID = "AKIABROWSER"
SECRET = "browser/secret+access/key/0123456789abcdef"

# Job code runs in a dedicated Web Worker; this one does what the runtime does with its URLs.
WORKER_ROUND_TRIP = """async ([putUrl, getUrl, text]) => {
  const code = `onmessage = async (event) => {
    const [putUrl, getUrl, text] = event.data;
    try {
      const put = await fetch(putUrl, {method: 'PUT', body: new Blob([text], {type: 'application/json'})});
      const get = await fetch(getUrl);
      postMessage({put: put.status, get: get.status, body: await get.text(), origin: self.origin});
    } catch (error) {
      postMessage({error: String(error), origin: self.origin});
    }
  };`;
  const worker = new Worker(URL.createObjectURL(new Blob([code], {type: 'text/javascript'})));
  return await new Promise((resolve) => {
    worker.onmessage = (event) => { worker.terminate(); resolve(event.data); };
    worker.postMessage([putUrl, getUrl, text]);
  });
}"""


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    server = Appliance(tmp_path_factory.mktemp("cloud-browser") / "data").start()
    server.add_user(EMAIL, "coordinator", PASSWORD)
    yield server
    server.stop()


@pytest.fixture
def page(chromium):
    # The dashboard's own CSP allows connections to the appliance only (the job sandbox gets a policy
    # listing the bucket's origin); CORS, which this test is about, is enforced all the same.
    context = chromium.new_context(bypass_csp=True)
    context.set_default_timeout(30_000)
    yield context.new_page()
    context.close()


def test_workers_on_the_appliance_origin_put_and_get_through_presigned_urls(page: Page, appliance: Appliance, s3):
    bucket = s3.create_bucket("browser-data")
    page.goto(f"{appliance.url}/login")
    page.get_by_label("Email").fill(EMAIL)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Cloud Data").click()
    expect(page).to_have_url(re.compile(r"/ui/cloud$"))

    form = page.locator("#cloud-settings")
    form.get_by_label("Provider").select_option("s3")
    form.get_by_label("Endpoint URL").fill(s3.url)
    form.get_by_label("Region").fill(REGION)
    form.get_by_label("Bucket").fill(bucket)
    form.get_by_label("Access key id").fill(KEY_ID)
    form.get_by_label("Secret access key").fill(SECRET)
    form.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").first).to_contain_text("Cloud Data settings saved")
    expect(page.locator("#secret-state")).to_contain_text("Secret access key: set")
    assert SECRET not in page.content()

    page.get_by_role("button", name="Test connection").click()
    expect(page.locator("#check-result")).to_contain_text(f"Connected: bucket {bucket} at {s3.url}")

    storage = CloudStorage("s3", s3.url, REGION, bucket, KEY_ID, SECRET)
    payload = '[["word", 1], ["ünïcode", 2]]\n'
    before = page.evaluate(
        WORKER_ROUND_TRIP,
        [service.presign_put(storage, "before-cors.json"), service.presign_get(storage, "before-cors.json"), payload],
    )
    # Without a CORS rule the browser refuses the cross-origin PUT (its preflight is not answered).
    assert before["origin"] == appliance.url and "Failed to fetch" in before.get("error", ""), before
    assert "Contents" not in s3.client().list_objects_v2(Bucket=bucket)

    page.get_by_role("button", name="Set CORS for workers").click()
    expect(page.locator("#cors-result")).to_contain_text(
        f"CORS set on bucket {bucket}: worker pages on {appliance.url}"
    )

    key = "runs/1/A/part-00000.json"
    after = page.evaluate(
        WORKER_ROUND_TRIP, [service.presign_put(storage, key), service.presign_get(storage, key), payload]
    )
    assert after == {"put": 200, "get": 200, "body": payload, "origin": appliance.url}
    assert s3.client().get_object(Bucket=bucket, Key=key)["Body"].read().decode() == payload
