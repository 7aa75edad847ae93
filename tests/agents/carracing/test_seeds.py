"""The track ranges: far apart, and named in reports by what they are for."""

from agents.carracing import seeds
from agents.carracing.seeds import RANGE, TEST_SEED, VALIDATION_SEED, track_range


def test_the_ranges_do_not_overlap():
    starts = sorted([(VALIDATION_SEED, RANGE), (TEST_SEED, RANGE), (seeds.SELECT_SEED, RANGE), (seeds.CHECK_SEED, RANGE), (seeds.DAGGER_SEED, RANGE)])
    for (a, n), (b, _) in zip(starts, starts[1:]):
        assert a + n <= b, (a, b)


def test_a_report_names_the_range_it_drove():
    assert track_range(VALIDATION_SEED, 50) == "validation tracks 10000..10049"
    assert track_range(TEST_SEED, 10) == "test tracks 50000..50009"
    assert track_range(TEST_SEED + 5, 1) == "test tracks 50005"
    assert track_range(500, 2) == "tracks 500..501"
    assert track_range(VALIDATION_SEED + RANGE - 5, 10) == "tracks 19995..20004"  # runs past the validation range: neither
