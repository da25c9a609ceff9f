"""The wait after a pair's failures: nothing at first, then doubling from the first wait up to the cap."""

import datetime as dt

import pytest

from appliance.accounts.throttle import Policy, advice
from appliance.config import ConfigError, load_settings


def test_the_wait_doubles_from_the_first_wait_up_to_the_cap():
    policy = Policy.of(load_settings({"data_dir": "/nonexistent"}))
    seconds = [policy.wait(n).total_seconds() for n in range(1, 12)]
    assert seconds == [0, 0, 0, 0, 30, 60, 120, 240, 480, 900, 900]
    # However many failures an attacker piles up, the wait stays at the cap (and computes).
    assert policy.wait(10**6) == dt.timedelta(minutes=15)


def test_the_wait_is_told_in_seconds_then_minutes():
    assert advice(1).endswith("try again in 1 second.")
    assert advice(119).endswith("try again in 119 seconds.")
    assert advice(121).endswith("try again in 3 minutes.")


@pytest.mark.parametrize(
    "setting, value, message",
    [
        ("login_max_failures", 0, "login_max_failures must be at least 1"),
        ("login_first_wait_seconds", 0, "login_first_wait_seconds must be at least 1"),
        ("login_max_wait_minutes", 2000, "login_max_wait_minutes must be between 1 and 1440"),
    ],
)
def test_a_policy_that_cannot_work_is_refused_at_start(setting, value, message):
    with pytest.raises(ConfigError, match=message):
        load_settings({"data_dir": "/nonexistent", setting: value})
