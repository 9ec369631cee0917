"""Fetching the datasets from a mirror or their URLs, checked (d2lrepro.core.fetch)."""

import hashlib

import pytest

from d2lrepro.core import fetch

PAYLOAD = b"some dataset bytes\n" * 100


def spec_for(payload=PAYLOAD, urls=()):
    return fetch.DataFile(
        "file.bin", "set/file.bin", len(payload), hashlib.sha256(payload).hexdigest(), urls
    )


def make_mirror(root, payload):
    (root / "set").mkdir(parents=True)
    (root / "set" / "file.bin").write_bytes(payload)
    return root


def test_fetch_from_mirror(tmp_path):
    mirror = make_mirror(tmp_path / "mirror", PAYLOAD)
    dest = tmp_path / "out" / "file.bin"
    assert fetch.fetch(spec_for(), dest, [mirror]) == str(mirror / "set" / "file.bin")
    assert dest.read_bytes() == PAYLOAD


def test_corrupted_file_names_file_and_checksums(tmp_path):
    bad = PAYLOAD.replace(b"some", b"SOME")
    mirror = make_mirror(tmp_path / "mirror", bad)
    spec = spec_for()
    dest = tmp_path / "out" / "file.bin"
    with pytest.raises(fetch.FetchError) as error:
        fetch.fetch(spec, dest, [mirror])
    message = str(error.value)
    assert "file.bin" in message and "checksum mismatch" in message
    assert spec.sha256 in message and hashlib.sha256(bad).hexdigest() in message
    assert not dest.exists() and list(dest.parent.iterdir()) == []  # nothing half-written


def test_truncated_file_is_reported_as_truncated(tmp_path):
    mirror = make_mirror(tmp_path / "mirror", PAYLOAD[:100])
    with pytest.raises(
        fetch.FetchError, match=f"truncated file: got 100 bytes.*expected {len(PAYLOAD)} bytes"
    ):
        fetch.fetch(spec_for(), tmp_path / "out" / "file.bin", [mirror])


def test_missing_mirror_falls_back_to_urls(tmp_path):
    origin = make_mirror(tmp_path / "origin", PAYLOAD)
    spec = spec_for(urls=((origin / "set" / "file.bin").as_uri(),))
    dest = tmp_path / "out" / "file.bin"
    assert fetch.fetch(spec, dest, [tmp_path / "no-such-mirror"]).startswith("file://")
    assert dest.read_bytes() == PAYLOAD


def test_every_source_failing_lists_what_was_tried(tmp_path):
    spec = spec_for(urls=((tmp_path / "gone").as_uri(),))
    with pytest.raises(fetch.FetchError) as error:
        fetch.fetch(spec, tmp_path / "out" / "file.bin", [tmp_path / "no-such-mirror"])
    message = str(error.value)
    assert str(tmp_path / "no-such-mirror" / "set" / "file.bin") in message
    assert (tmp_path / "gone").as_uri() in message


def test_mirrors_reads_config_then_environment(monkeypatch):
    monkeypatch.setenv("D2L_DATA_MIRROR", "/env/mirror")
    assert fetch.mirrors("/config/mirror") == ["/config/mirror", "/env/mirror"]
    monkeypatch.delenv("D2L_DATA_MIRROR")
    assert fetch.mirrors(None) == []


def test_registry_matches_the_mirror(mirror, tmp_path):
    for spec in fetch.FILES.values():
        assert fetch.fetch(spec, tmp_path / spec.mirror_path, [mirror]) == str(
            mirror / spec.mirror_path
        )
