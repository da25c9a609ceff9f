"""PMRFS bucket names (S3's rules) and object keys."""

from __future__ import annotations

import pytest

from appliance.pmrfs.names import MAX_KEY_BYTES, InvalidName, check_bucket_name, check_key


@pytest.mark.parametrize(
    "name",
    ["abc", "my-bucket", "my.bucket.2026", "0days", "a" * 63, "a-b.c-d", "192.168.1.1a", "1.2.3"],
)
def test_good_bucket_names(name):
    assert check_bucket_name(name) == name


@pytest.mark.parametrize(
    "name,why",
    [
        ("ab", "3 to 63"),
        ("a" * 64, "3 to 63"),
        ("", "3 to 63"),
        ("MyBucket", "lowercase"),
        ("my_bucket", "lowercase"),
        ("-bucket", "start and end"),
        ("bucket-", "start and end"),
        (".bucket", "start and end"),
        ("bucket.", "start and end"),
        ("my bucket", "lowercase"),
        ("bücket", "lowercase"),
        ("my..bucket", "two dots"),
        ("192.168.1.1", "IP address"),
        ("10.0.0.255", "IP address"),
        ("abc\n", "lowercase"),  # a regex's $ would match before that trailing newline
    ],
)
def test_bad_bucket_names(name, why):
    with pytest.raises(InvalidName, match=why):
        check_bucket_name(name)


@pytest.mark.parametrize(
    "key",
    [
        "a",
        "report.csv",
        "a/b/c.txt",
        "spaces are fine.txt",
        "ünïcødé/日本.txt",
        "x" * MAX_KEY_BYTES,
        "a/.hidden",
        "\u00a0no-break space, just past C1",
    ],
)
def test_good_keys(key):
    assert check_key(key) == key


@pytest.mark.parametrize(
    "key,why",
    [
        ("", "empty"),
        ("x" * (MAX_KEY_BYTES + 1), "1024 bytes"),
        ("é" * 513, "1024 bytes"),  # 1026 bytes of UTF-8 in 513 characters
        ("/a", "start or end"),
        ("a/", "start or end"),
        ("a//b", "segments"),
        ("a/./b", "segments"),
        ("a/../b", "segments"),
        ("..", "segments"),
        ("a\nb", "control character U\\+000A"),
        ("a\x00b", "control character U\\+0000"),
        ("a\x1fb", "control character U\\+001F"),
        ("a\x7fb", "control character U\\+007F"),
        ("a\x80b", "control character U\\+0080"),
        ("a\x9bb", "control character U\\+009B"),  # C1's CSI: starts a terminal escape sequence
        ("a\\..\\..\\x", "backslash .* path separator"),
        ("dir\\file", "backslash"),
        ("a\ud800b", r"lone surrogate \(U\+D800\)"),
    ],
)
def test_bad_keys(key, why):
    with pytest.raises(InvalidName, match=why):
        check_key(key)


def test_a_refused_character_is_pointed_at():
    with pytest.raises(InvalidName, match=r"character 7 of 'report\\tcsv'"):
        check_key("report\tcsv")
