"""walctl.wal.pacing's StageRecorder (issue 32): exact sums, counts, the sample's halving and the summary."""

from __future__ import annotations

from walctl.wal import pacing
from walctl.wal.pacing import SAMPLE_CAP, STAGE_HELP, STAGES, StageRecorder


def test_stages_are_the_five_and_each_has_help():
    assert STAGES == ("queued", "budget", "write", "flush", "total")
    assert set(STAGE_HELP) == set(STAGES)
    assert SAMPLE_CAP == 1 << 18


def test_add_sums_each_stage_and_total_is_queued_write_flush():
    r = StageRecorder()
    r.add(1000, 300, 2000, 500)
    r.add(10, 1, 20, 3)
    assert r.count == 2
    assert r.sums == {"queued": 1010, "budget": 301, "write": 2020, "flush": 503, "total": 3533}
    assert list(r.samples["queued"]) == [1000, 10]
    assert list(r.samples["budget"]) == [300, 1]
    assert list(r.samples["write"]) == [2000, 20]
    assert list(r.samples["flush"]) == [500, 3]
    assert list(r.samples["total"]) == [3500, 33]


def test_a_full_sample_keeps_every_second_block_then_every_second_added():
    r = StageRecorder(cap=4)
    for i in range(1, 5):  # the 4th fills it: halved to blocks 2 and 4
        r.add(i, i, i, 0)
    assert list(r.samples["queued"]) == [2, 4]
    assert list(r.samples["budget"]) == [2, 4]
    assert list(r.samples["write"]) == [2, 4]
    assert list(r.samples["flush"]) == [0, 0]
    assert list(r.samples["total"]) == [4, 8]
    r.add(5, 5, 5, 0)  # odd count: not sampled
    assert list(r.samples["queued"]) == [2, 4]
    r.add(6, 6, 6, 0)
    assert list(r.samples["queued"]) == [2, 4, 6]
    assert r.count == 6
    assert r.sums["queued"] == 21 and r.sums["total"] == 42
    r.add(7, 0, 0, 0)
    r.add(8, 0, 0, 0)  # 4 kept again: halved, stride 4
    assert list(r.samples["queued"]) == [4, 8]
    for i in range(9, 13):
        r.add(i, 0, 0, 0)
    assert list(r.samples["queued"]) == [4, 8, 12]


def test_the_cap_is_the_sample_size_that_triggers_halving():
    r = StageRecorder(cap=3)
    r.add(1, 0, 0, 0)
    r.add(2, 0, 0, 0)
    assert list(r.samples["queued"]) == [1, 2]
    r.add(3, 0, 0, 0)
    assert list(r.samples["queued"]) == [2]
    assert StageRecorder().cap == SAMPLE_CAP


def test_summary_of_nothing_is_zeros():
    out = StageRecorder().summary()
    assert out == {"blocks": 0, **{s: {"p50": 0.0, "p99": 0.0, "mean": 0.0} for s in STAGES}}


def test_summary_reports_percentiles_and_means_in_microseconds():
    r = StageRecorder()
    for i in range(1, 101):  # 1..100 us queued, written in 2 us, no flush
        r.add(i * 1000, 0, 2000, 0)
    out = r.summary()
    assert out["blocks"] == 100
    assert out["queued"] == {"p50": 50.0, "p99": 99.0, "mean": 50.5}
    assert out["write"] == {"p50": 2.0, "p99": 2.0, "mean": 2.0}
    assert out["total"] == {"p50": 52.0, "p99": 101.0, "mean": 52.5}
    assert out["budget"] == {"p50": 0.0, "p99": 0.0, "mean": 0.0}


def test_summary_rounds_to_a_tenth_and_sorts_samples():
    r = StageRecorder()
    r.add(3456, 0, 0, 0)
    r.add(1234, 0, 0, 0)
    r.add(2222, 7, 0, 0)
    out = r.summary()
    assert out["queued"]["p50"] == 2.2
    assert out["queued"]["p99"] == 3.5
    assert out["queued"]["mean"] == round(6912 / 3 / 1000, 1) == 2.3
    assert out["budget"]["p99"] == 0.0  # 7 ns


def test_rank_of_no_samples_is_zero():
    assert pacing._rank([], 50.0) == 0.0
    assert pacing._rank([1500, 2500], 50.0) == 1.5
    assert pacing._rank([1500, 2500], 99.0) == 2.5


def test_pacer_names_are_reexported():
    from walctl.device import pacing as device_pacing

    assert pacing.Budget is device_pacing.Budget
    assert pacing.Pacer is device_pacing.Pacer
    assert pacing.TokenBucket is device_pacing.TokenBucket


def test_summary_means_are_rounded_to_a_tenth_of_a_microsecond():
    r = StageRecorder()
    r.add(1234, 0, 0, 0)
    assert r.summary()["queued"]["mean"] == 1.2
