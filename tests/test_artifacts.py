"""Atomic artifact writes: the old file or the whole new one, and no temporary file left behind."""

import pandas as pd
import pytest

from spica_lib.base.artifacts import atomic_path, atomic_write_parquet, atomic_write_text


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path):
    target = tmp_path / "summary.json"
    atomic_write_text(target, "old")
    with pytest.raises(RuntimeError), atomic_path(target) as temp:
        temp.write_text("half of the new")
        raise RuntimeError("killed mid-write")
    assert target.read_text() == "old" and leftovers(tmp_path) == []


def test_text_and_parquet_land_whole_under_their_name(tmp_path):
    atomic_write_text(tmp_path / "a" / "b.json", "{}\n")
    atomic_write_parquet(tmp_path / "t.parquet", pd.DataFrame({"x": [1, 2]}))
    assert (tmp_path / "a" / "b.json").read_text() == "{}\n"
    assert pd.read_parquet(tmp_path / "t.parquet")["x"].tolist() == [1, 2]
    assert leftovers(tmp_path) == [] and leftovers(tmp_path / "a") == []


def test_two_writers_of_one_file_never_share_a_temporary(tmp_path):
    target = tmp_path / "x.json"
    with atomic_path(target) as first, atomic_path(target) as second:
        assert first != second
        first.write_text("1")
        second.write_text("2")
    assert target.read_text() == "1"  # the outer block finishes last and wins, whole


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_an_artifact_is_as_readable_as_the_umask_allows(tmp_path, umask, mode):
    # Collaborators on a shared cluster read a run's results: mkstemp's 0600 must not stay.
    import os

    previous = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "ranked.csv", "rank\n1\n")
        atomic_write_parquet(tmp_path / "candidates.parquet", pd.DataFrame({"rank": [1]}))
    finally:
        os.umask(previous)
    assert {(tmp_path / name).stat().st_mode & 0o777 for name in ("ranked.csv", "candidates.parquet")} == {mode}
