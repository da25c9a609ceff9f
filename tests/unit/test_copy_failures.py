"""Whom a run blames for copies that failed between its workers (jobs/copy_failures.py)."""

from appliance.jobs.copy_failures import CopyFailures


def test_a_source_that_fails_two_targets_is_blamed_and_they_are_not():
    failures = CopyFailures(ranks=4)
    failures.record("hung", "a")
    assert failures.to_blame() == {}  # one failed copy: either end may be at fault
    failures.record("hung", "b")
    assert failures.to_blame() == {"hung": "its copies with 2 workers failed (a, b)"}
    failures.record("hung", "c")
    assert failures.to_blame() == {}  # blamed once
    assert not failures.limit_reached()


def test_a_target_that_receives_from_nobody_is_blamed():
    failures = CopyFailures(ranks=4)
    for source in ("a", "b", "c"):
        failures.record(source, "deaf")
    assert failures.to_blame() == {"deaf": "its copies with 3 workers failed (a, b, c)"}


def test_the_same_copy_failing_twice_blames_its_source_as_a_fetch_failure_does():
    failures = CopyFailures(ranks=2)
    failures.record("s", "t")
    failures.record("s", "t")
    assert failures.to_blame() == {"s": "2 copies from it to worker t failed"}


def test_a_blamed_worker_is_no_witness_against_its_peers():
    failures = CopyFailures(ranks=4)
    failures.record("hung", "a")
    failures.record("hung", "b")
    failures.to_blame()
    failures.record("c", "a")  # a's one other failure does not make two peers
    assert failures.to_blame() == {}


def test_blaming_more_than_half_the_ranks_means_the_network_is_at_fault():
    failures = CopyFailures(ranks=4)
    for target in ("a", "b", "c"):
        for source in ("x", "y"):
            failures.record(source, target)
    failures.to_blame()
    assert failures.limit_reached()


def test_too_many_failed_copies_end_the_run_even_when_nobody_is_blamed():
    failures = CopyFailures(ranks=2)
    for n in range(6):  # ranks changing hands: each pair fails once
        failures.record(f"s{n}", f"t{n}")
    assert failures.to_blame() == {} and not failures.limit_reached()
    failures.record("s6", "t6")
    assert failures.limit_reached()  # more than 3 a rank
