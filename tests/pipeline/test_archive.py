"""A run's archive: written, read back, and every kind of bad archive refused by name."""

import datetime as dt
import hashlib
import json
import re
import stat
import zipfile

import pandas as pd
import pytest

from d2lrepro.pipeline import archive, claims

ENV = {"cpu_model": "Test CPU", "usable_cores": 2, "torch_version": "2.13.0", "gpus": []}
LEDGER = """\
sections:
  - id: s
    title: A section
    claims:
      - {id: s.c, kind: measurement, statement: It holds, printed: "2x",
         evidence: results/x/metrics.csv,
         checks: [{kind: ratio_above, numerator: a, denominator: b, bound: 1.5}]}
"""
CLAIMS = pd.DataFrame(
    [
        {
            "id": "s.c",
            "section": "s",
            "kind": "measurement",
            "statement": "It holds",
            "printed": "2x",
            "measured": "a / b = 3 / 1 = 3",
            "verdict": claims.REPRODUCED,
            "reason": "",
            "device": "cpu",
            "evidence": "results/x/metrics.csv",
        }
    ]
)
RUN = {"host": "box", "date": "2026-01-02T03:04:05+00:00", "preset": "smoke", "commit": "abc"}


def results_tree(root):
    """The files of a small run, by their names in the archive."""
    files = {
        archive.LEDGER: LEDGER,
        archive.CLAIMS: CLAIMS.to_csv(index=False),
        archive.ENVIRONMENT: json.dumps(ENV),
        "results/x/metrics.csv": "metric,value\na,3\nb,1\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return {name: root / name for name in files}


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "run.zip"
    archive.write(path, results_tree(tmp_path / "tree"), RUN)
    return path


def members(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {i.filename: z.read(i) for i in z.infolist()}


def make_zip(path, contents: dict[str, bytes], manifest: dict | None = None, attrs=None):
    """A zip of ``contents`` with a manifest listing them (or ``manifest``); ``attrs``: member
    name -> external_attr."""
    listed = {
        n: {"bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in contents.items()
    }
    manifest = manifest or {"format": archive.FORMAT, "version": archive.VERSION, "files": listed}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(archive.MANIFEST, json.dumps(manifest))
        for name, data in contents.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (attrs or {}).get(name, archive.MEMBER_MODE)
            z.writestr(info, data)
    return path


def refused(path, **kwargs) -> str:
    with pytest.raises(archive.ArchiveError) as error:
        archive.read(path, **kwargs)
    assert str(path) in str(error.value)  # the message names the file
    return str(error.value)


def test_an_archive_reads_back_what_the_run_wrote(good, tmp_path):
    before = sorted(tmp_path.rglob("*"))
    run = archive.read(good)
    assert sorted(tmp_path.rglob("*")) == before  # reading writes nothing
    assert run.info == RUN and run.environment == ENV
    pd.testing.assert_frame_equal(run.claims, CLAIMS.fillna(""), check_dtype=False)
    assert run.ledger["sections"][0]["claims"][0]["id"] == "s.c"
    assert run.table("results/x/metrics.csv")["value"].tolist() == [3, 1]
    assert run.table("results/absent.csv") is None
    manifest = json.loads(members(good)[archive.MANIFEST])
    metrics = (tmp_path / "tree" / "results/x/metrics.csv").read_bytes()
    assert manifest["files"]["results/x/metrics.csv"] == {
        "bytes": len(metrics),
        "sha256": hashlib.sha256(metrics).hexdigest(),
    }


def test_the_same_files_make_the_same_members(tmp_path):
    files = results_tree(tmp_path / "tree")
    one, two = tmp_path / "1.zip", tmp_path / "2.zip"
    archive.write(one, files, RUN)
    archive.write(two, files, RUN)
    assert one.read_bytes() == two.read_bytes()


def test_an_archive_needs_the_claims_environment_and_ledger(tmp_path):
    files = results_tree(tmp_path / "tree")
    del files[archive.CLAIMS]
    with pytest.raises(ValueError, match="results/claims.csv"):
        archive.write(tmp_path / "run.zip", files, RUN)


def test_a_file_that_is_not_a_zip_is_refused(tmp_path):
    path = tmp_path / "run.zip"
    path.write_text("claims, but not zipped")
    assert "not a zip archive" in refused(path)
    assert "no such file" in refused(tmp_path / "absent.zip")


def test_a_zip_whose_directory_is_broken_is_refused(good, tmp_path):
    data = bytearray(good.read_bytes())
    entry = data.rindex(b"PK\x01\x02")  # the central directory's last entry
    data[entry : entry + 4] = b"XXXX"
    path = tmp_path / "broken.zip"
    path.write_bytes(data)
    assert zipfile.is_zipfile(path)  # its end record is intact
    assert "not a readable zip archive: Bad magic number" in refused(path)


def test_an_archive_without_its_ledger_is_refused(good, tmp_path):
    contents = members(good)
    del contents[archive.MANIFEST]
    for member in (archive.CLAIMS, archive.ENVIRONMENT, archive.LEDGER):
        path = make_zip(tmp_path / "bad.zip", {k: v for k, v in contents.items() if k != member})
        assert f"no {member} (" in refused(path)
    bare = tmp_path / "bare.zip"
    with zipfile.ZipFile(bare, "w") as z:
        for name, data in contents.items():
            z.writestr(name, data)
    assert "no manifest.json" in refused(bare)


def test_an_archive_of_an_unknown_version_or_format_is_refused(good, tmp_path):
    contents = members(good)
    manifest = json.loads(contents.pop(archive.MANIFEST))
    path = make_zip(tmp_path / "v2.zip", contents, manifest | {"version": 2})
    assert "unknown archive version 2 (this reader knows 1)" in refused(path)
    path = make_zip(tmp_path / "other.zip", contents, manifest | {"format": "something"})
    assert "does not describe a d2lrepro-run archive" in refused(path)


@pytest.mark.parametrize(
    "name, message",
    [
        ("../x", "is not a plain relative file name"),
        ("results/../../x", "is not a plain relative file name"),
        ("/etc/x", "has an absolute name"),
        ("C:/x", "has an absolute name"),
        ("results\\..\\x", "has control characters or backslashes in its name"),
        ("results/", "is not a plain relative file name"),
    ],
)
def test_a_member_named_outside_its_directory_is_refused(good, tmp_path, name, message):
    contents = members(good)
    contents.pop(archive.MANIFEST)
    path = make_zip(tmp_path / "bad.zip", contents | {name: b"x"})
    assert f"member {name!r} {message}" in refused(path)


def test_a_link_or_a_device_is_refused(good, tmp_path):
    contents = members(good)
    contents.pop(archive.MANIFEST)
    link = (stat.S_IFLNK | 0o777) << 16
    path = make_zip(
        tmp_path / "link.zip", contents | {"results/l": b"/etc/passwd"}, None, {"results/l": link}
    )
    assert "member 'results/l' is a symbolic link" in refused(path)
    fifo = (stat.S_IFIFO | 0o644) << 16
    path = make_zip(tmp_path / "fifo.zip", contents | {"results/f": b""}, None, {"results/f": fifo})
    assert "member 'results/f' is not a regular file" in refused(path)


def test_sizes_are_bounded_per_member_and_in_all(good, tmp_path):
    contents = members(good)
    contents.pop(archive.MANIFEST)
    path = make_zip(tmp_path / "big.zip", contents | {"results/big.csv": b"0" * 5000})
    assert "member 'results/big.csv' unpacks to 5000 bytes (at most 4096)" in refused(
        path, max_member_bytes=4096
    )
    assert "unpacks to" in refused(path, max_total_bytes=5000)
    archive.read(path)  # within the default bounds


def test_a_member_that_does_not_match_the_manifest_is_refused(good, tmp_path):
    contents = members(good)
    manifest = json.loads(contents.pop(archive.MANIFEST))
    changed = contents | {"results/x/metrics.csv": b"metric,value\na,9\nb,1\n"}
    path = make_zip(tmp_path / "changed.zip", changed, manifest)
    assert "member 'results/x/metrics.csv' does not match its checksum" in refused(path)
    extra = make_zip(tmp_path / "extra.zip", contents | {"results/y.csv": b"1"}, manifest)
    assert "member 'results/y.csv' is not listed in its manifest.json" in refused(extra)
    manifest["files"]["results/z.csv"] = {"bytes": 1, "sha256": "0" * 64}
    missing = make_zip(tmp_path / "missing.zip", contents, manifest)
    assert "lists 'results/z.csv', which it does not hold" in refused(missing)


def test_claims_without_verdicts_are_refused(good, tmp_path):
    contents = members(good)
    contents.pop(archive.MANIFEST)
    table = CLAIMS.drop(columns=["verdict"]).to_csv(index=False).encode()
    path = make_zip(tmp_path / "bad.zip", contents | {archive.CLAIMS: table})
    assert "results/claims.csv lacks the columns ['verdict']" in refused(path)


def test_members_named_twice_and_an_environment_that_is_no_mapping_are_refused(good, tmp_path):
    contents = members(good)
    contents.pop(archive.MANIFEST)
    path = make_zip(tmp_path / "env.zip", contents | {archive.ENVIRONMENT: b"[1, 2]"})
    assert "results/environment.json or claims.yaml is not a mapping" in refused(path)
    path = make_zip(tmp_path / "twice.zip", contents)
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(path, "a") as z:
        z.writestr(archive.CLAIMS, contents[archive.CLAIMS])
    assert "members named twice: ['results/claims.csv']" in refused(path)


def test_the_name_is_given_or_decided_once_per_results_tree(tmp_path, monkeypatch):
    record = tmp_path / "results" / "archive_name.txt"
    assert archive.name("mine.zip", record) == "mine.zip" and not record.exists()
    monkeypatch.setattr(archive.socket, "gethostname", lambda: "node-7.cluster.example")
    chosen = archive.name(None, record)
    today = dt.datetime.now(dt.UTC).date().isoformat()
    assert re.fullmatch(rf"run-node-7-{today}-[0-9a-f]{{6}}\.zip", chosen)
    assert record.read_text().strip() == chosen
    monkeypatch.setattr(archive.socket, "gethostname", lambda: "another")
    assert archive.name(None, record) == chosen  # later parses keep it
    name = archive.default_name("a b/$c", dt.date(2026, 1, 2), "0a1b2c")
    assert name == "run-a_b_c-2026-01-02-0a1b2c.zip"


def test_two_trees_of_one_host_and_day_name_their_archives_apart(tmp_path, monkeypatch):
    monkeypatch.setattr(archive.socket, "gethostname", lambda: "vm")
    first = archive.name(None, tmp_path / "one" / "archive_name.txt")
    second = archive.name(None, tmp_path / "two" / "archive_name.txt")
    assert first != second and first.startswith("run-vm-") and second.startswith("run-vm-")
