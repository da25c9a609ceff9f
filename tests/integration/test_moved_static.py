"""Static files that moved still answer at their old URLs, which jobs already written name."""

from __future__ import annotations

from tests.support import Appliance

OLD = "/static/vendor/tfjs/tf-data-parallel.js"
NEW = "/static/jobs/tf-data-parallel.js"


def test_a_job_naming_the_old_url_of_the_tfjs_add_on_still_gets_the_script(appliance: Appliance):
    client = appliance.client()
    script = client.get(NEW)
    assert script.status_code == 200 and "trainOnBatch" in script.text
    moved = client.get(OLD, follow_redirects=False)
    assert moved.status_code == 301 and moved.headers["location"] == NEW
    # The job sandbox reads static files across origins: the redirect must let it.
    assert moved.headers["access-control-allow-origin"] == "*"
    followed = client.get(OLD, follow_redirects=True)
    assert followed.status_code == 200 and followed.content == script.content
