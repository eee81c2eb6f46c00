import math

import pytest

import keras_transformer as kt
from tests.harness import assert_serializable


def _formula(step, hidden_dim=512, warmup=4000):
    return hidden_dim**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.parametrize("step", [1, 4000, 100000])
def test_matches_equation_3(step):
    schedule = kt.TransformerSchedule(hidden_dim=512, warmup_steps=4000)
    assert math.isclose(float(schedule(step)), _formula(step), rel_tol=1e-5)


def test_step_zero_is_guarded_and_peak_is_at_warmup():
    schedule = kt.TransformerSchedule(hidden_dim=512)
    assert float(schedule(0)) == pytest.approx(_formula(1))
    assert float(schedule(4000)) > float(schedule(3000))
    assert float(schedule(4000)) > float(schedule(5000))


def test_round_trips_through_config():
    revived = assert_serializable(kt.TransformerSchedule(256, warmup_steps=100, scale=2.0))
    assert float(revived(50)) == pytest.approx(2.0 * _formula(50, 256, 100))


@pytest.mark.parametrize("kwargs, name", [({"hidden_dim": 0}, "hidden_dim"),
                                          ({"hidden_dim": 8, "warmup_steps": -1}, "warmup_steps"),
                                          ({"hidden_dim": 8, "scale": 0}, "scale")])
def test_invalid_arguments(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        kt.TransformerSchedule(**kwargs)


def test_plot(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    ax = kt.TransformerSchedule(512, warmup_steps=10).plot()
    ax.figure.savefig(tmp_path / "schedule.png")
    assert (tmp_path / "schedule.png").stat().st_size > 0
