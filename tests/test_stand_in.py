"""The stand-in replay durations of the control-flow benchmark (spica_lib/replay/stand_in.py)."""

import time

import pytest

from spica_lib.replay.stand_in import stand_in_seconds, wait_out_stand_in


def test_stand_in_durations_follow_the_given_median_and_90th_percentile_and_repeat_per_call():
    draws = sorted(stand_in_seconds({"trial": i}, "2.3,6.5") for i in range(4000))
    assert draws[2000] == pytest.approx(2.3, rel=0.08) and draws[3600] == pytest.approx(6.5, rel=0.08)
    assert stand_in_seconds({"trial": 7}, "2.3,6.5") == stand_in_seconds({"trial": 7}, "2.3,6.5")


def test_no_stand_in_is_set_by_default_and_a_bad_one_is_named(monkeypatch):
    monkeypatch.delenv("SPICA_STAND_IN_DURATION", raising=False)
    assert stand_in_seconds({"trial": 1}) is None
    with pytest.raises(ValueError, match="expected '<p50>,<p90>'"):
        stand_in_seconds({}, "fast")
    with pytest.raises(ValueError, match="0 < p50 < p90"):
        stand_in_seconds({}, "3,2")


def test_a_replay_child_waits_out_its_stand_in_duration(monkeypatch):
    monkeypatch.setenv("SPICA_STAND_IN_DURATION", "0.2,0.3")
    started = time.monotonic()
    wait_out_stand_in({"trial": 1}, started)
    assert time.monotonic() - started >= stand_in_seconds({"trial": 1}) > 0.05
