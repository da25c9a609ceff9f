"""The per-account allowance: a burst of N, then one every 60/N seconds; refusals count nothing."""

from appliance.accounts.rate_limits import Limiter


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_burst_then_one_every_interval_and_the_wait_is_exact():
    clock = Clock()
    limiter = Limiter(6, clock=clock)  # one every 10 s
    assert [limiter.take("carol") for _ in range(6)] == [0.0] * 6
    assert limiter.take("carol") == 10.0
    clock.t += 4
    assert limiter.take("carol") == 6.0  # refusals did not push the wait further
    clock.t += 6
    assert limiter.take("carol") == 0.0
    assert limiter.take("carol") == 10.0
    # Another key has its own allowance.
    assert limiter.take("dave") == 0.0


def test_an_idle_key_gets_its_whole_burst_back():
    clock = Clock()
    limiter = Limiter(3, clock=clock)
    for _ in range(3):
        limiter.take("carol")
    assert limiter.take("carol") > 0
    clock.t += 60
    assert [limiter.take("carol") for _ in range(3)] == [0.0] * 3
