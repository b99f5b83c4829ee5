"""`_last_checkpoint` checksum: the protocol's canonical JSON and MD5 (no Spark needed)."""

from __future__ import annotations

import pytest

from deltaspark.log.json_checksum import (
    DuplicateKeyError,
    canonicalize,
    checksum_of_text,
    parse_json_preserving_numbers,
    url_encode,
)
from deltaspark.log.last_checkpoint import parse_last_checkpoint

SPEC_SAMPLE = (
    '{"k0":"\'v 0\'", "checksum": "adsaskfljadfkjadfkj", "k1":{"k2": 2, "k3": ["v3", [1, 2], '
    '{"k4": "v4", "k5": ["v5", "v6", "v7"]}]}}'
)
SPEC_CANONICAL = (
    '"k0"="%27v%200%27","k1"+"k2"=2,"k1"+"k3"+0="v3","k1"+"k3"+1+0=1,"k1"+"k3"+1+1=2,'
    '"k1"+"k3"+2+"k4"="v4","k1"+"k3"+2+"k5"+0="v5","k1"+"k3"+2+"k5"+1="v6","k1"+"k3"+2+"k5"+2="v7"'
)


def test_protocol_sample_canonical_form_and_checksum():
    assert canonicalize(parse_json_preserving_numbers(SPEC_SAMPLE)) == SPEC_CANONICAL
    assert checksum_of_text(SPEC_SAMPLE) == "6a92d155a59bf2eecbd4b4ec7fd1f875"


def test_url_encoding_is_strict_and_upper_case():
    assert url_encode("a-b._~Z9") == "a-b._~Z9"  # unreserved octets are never encoded
    assert url_encode("a b/>:") == "a%20b%2F%3E%3A"
    assert url_encode("é") == "%C3%A9"  # UTF-8 octets


def test_pairs_are_sorted_by_utf8_bytes_of_the_path():
    assert canonicalize({"b": 1, "a": {"y": None, "x": "https://delta.io"}}) == (
        '"a"+"x"="https%3A%2F%2Fdelta.io","a"+"y"=null,"b"=1'
    )


def test_number_literals_are_kept_as_written():
    assert canonicalize(parse_json_preserving_numbers('{"a": 1.50, "b": 1e3, "c": true}')) == (
        '"a"=1.50,"b"=1e3,"c"=true'
    )


def test_duplicate_keys_are_invalid():
    with pytest.raises(DuplicateKeyError):
        parse_json_preserving_numbers('{"version": 1, "version": 2}')
    assert parse_last_checkpoint('{"version": 1, "version": 2}', "x") is None


def test_only_the_top_level_checksum_key_is_ignored():
    with_nested = parse_json_preserving_numbers('{"a": {"checksum": 1}, "checksum": "x"}')
    assert canonicalize(with_nested) == '"a"+"checksum"=1'


def test_last_checkpoint_hint_is_validated():
    valid = checksum_of_text('{"version":10,"size":3}')
    good = parse_last_checkpoint(f'{{"version": 10, "size": 3, "checksum": "{valid}"}}', "x")
    assert good is not None and good.version == 10 and good.size == 3
    assert parse_last_checkpoint('{"version": 10, "size": 3, "checksum": "deadbeef"}', "x") is None
    assert parse_last_checkpoint('{"version": 10}', "x").version == 10  # no checksum: accepted as is
