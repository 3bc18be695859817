"""One percentile for every report (`percentile.py`): linear interpolation for `tao sim`, the nearest order statistic
for the benches; both sort their input and give NaN for no values."""

import math

import pytest

from tao_coordinator.percentile import percentile


def test_linear_interpolates_between_the_order_statistics_around_the_share():
    assert percentile([40.0, 10.0, 30.0, 20.0], 0.5, method="linear") == 25.0
    assert percentile([10.0, 20.0, 30.0, 40.0], 0.9, method="linear") == pytest.approx(37.0)
    assert percentile([7.0], 0.99, method="linear") == 7.0


def test_nearest_takes_a_measured_value_rounding_the_position_half_to_even():
    values = [40.0, 10.0, 30.0, 20.0]
    assert percentile(values, 0.5, method="nearest") == 30.0  # position 1.5 rounds to 2
    assert percentile(values, 0.5 / 3, method="nearest") == 10.0  # position 0.5 rounds to 0
    assert percentile(values, 0.99, method="nearest") == 40.0
    assert percentile(values, 0.0, method="nearest") == 10.0


@pytest.mark.parametrize("method", ["linear", "nearest"])
def test_no_values_give_nan(method):
    assert math.isnan(percentile([], 0.5, method=method))
