"""The appliance serving HTTPS itself (tls_cert, tls_key) with a certificate made here by a test CA:
worker tabs in Chromium are in a secure context there and run a job, and the worker page opened over
plain http:// from another computer warns that it is not."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from playwright.sync_api import expect

from tests.browsers import Workers, launch
from tests.support import ADMIN_EMAIL, save_and_run, wait_for_run

pytestmark = pytest.mark.e2e

# A name that is not this machine (Chromium maps it to 127.0.0.1): a page opened over http:// there
# is not a secure context, as on an employee's computer reaching the server.
ELSEWHERE = "peermr.test"

SCRIPT = """const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 2;
execution.setInputFn(async function input() { return ['a b a', 'b c', 'a']; });
execution.addStage(new MapStage(async function map(x) {
  for (const [i, line] of x) for (const word of line.split(' ')) context.emit(word, 1);
  await context.onComplete();
}));
execution.addStage(new ReduceStage(async function reduce(keyToValues) {
  for (const key in keyToValues) context.emit(key, keyToValues[key].length);
  await context.onComplete();
}));
execution.start(jobRunner);
"""


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def certificate(directory: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate it signed for 127.0.0.1 and ELSEWHERE: (CA, certificate, key) PEM files."""
    now = dt.datetime.now(dt.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("PeerMR test CA"))
        .issuer_name(_name("PeerMR test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    names = [x509.DNSName(ELSEWHERE), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server = (
        x509.CertificateBuilder()
        .subject_name(_name(ELSEWHERE))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM) + paths[0].read_bytes())
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    ca, cert, key = certificate(tmp_path_factory.mktemp("tls"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SSL_CERT_FILE", str(ca))  # this test's HTTP clients trust the test CA
        yield cert, key


@pytest.fixture(scope="module")
def appliance(appliance_with, tls_files):
    cert, key = tls_files
    return appliance_with(tls_cert=cert, tls_key=key)


@pytest.fixture(scope="module")
def chromium(playwright):
    """Chromium that accepts the test CA's certificates (as a browser of a site whose CA IT deploys)."""
    browser = launch(
        playwright.chromium, extra=["--ignore-certificate-errors", f"--host-resolver-rules=MAP {ELSEWHERE} 127.0.0.1"]
    )
    yield browser
    browser.close()


def test_worker_tabs_over_https_are_in_a_secure_context_and_run_a_job(chromium, appliance, token, api):
    assert appliance.url.startswith("https://")
    assert httpx.get(appliance.url + "/health/ready").status_code == 200  # verified against the test CA
    fleet = Workers(chromium, appliance, token)
    fleet.add(2)
    try:
        for tab in fleet.tabs:
            assert tab.evaluate("window.isSecureContext && !!crypto.subtle")
            expect(tab.locator("#insecure-context")).to_be_hidden()
        run = wait_for_run(api, save_and_run(api, "words", SCRIPT))
        assert run["state"] == "succeeded", run
        output = sorted(api.get(f"/runs/{run['id']}/output").text.split())
        assert output == ['["a",3]', '["b",2]', '["c",1]']
    finally:
        for tab in list(fleet.tabs):
            fleet.close(tab)


def test_the_worker_page_over_http_from_elsewhere_warns(chromium, appliance_with):
    plain = appliance_with()
    token = plain.cli("token", "create", ADMIN_EMAIL).stdout.split()[-1]
    page = chromium.new_context().new_page()
    try:
        page.goto(f"http://{ELSEWHERE}:{plain.port}/worker/start#token={token}")
        expect(page.locator("#insecure-context")).to_be_visible(timeout=30_000)
        expect(page.locator("#insecure-context")).to_contain_text("https://")
        assert page.evaluate("window.isSecureContext") is False
    finally:
        page.context.close()
