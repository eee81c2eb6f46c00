"""`benchmarks/pretrained_speed.py` end to end on a tiny random Marian: every installed row,
the table, the JSON fields, and goal ratios that follow from the timings."""

import doctest
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("transformers")
pytest.importorskip("ctranslate2")
pytest.importorskip("torch")
pytest.importorskip("sentencepiece")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "pretrained_speed.py")
sys.path.insert(0, os.path.dirname(SCRIPT))

pytestmark = pytest.mark.slow

OURS = [name for name in ("tensorflow", "jax", "torch") if importlib.util.find_spec(name)]
SETTINGS = {"greedy b1": 3, "beam4 b2": 4}  # setting: sentences


def test_docstring_examples():
    import pretrained_speed

    failed, attempted = doctest.testmod(pretrained_speed)
    assert attempted > 0 and failed == 0


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    """The script's stdout and JSON for a d16, 1-layer model, 3 and 4 sentences, 1 round."""
    folder = tmp_path_factory.mktemp("pretrained_speed")
    output = folder / "result.json"
    done = subprocess.run(
        [sys.executable, SCRIPT, "--hidden-dim", "16", "--layers", "1", "--heads", "2",
         "--vocabulary-size", "200", "--sentences", "3", "4", "--repeats", "1",
         "--max-length", "4", "--settings", "1x1", "4x2", "--threads", "1",
         "--work-dir", str(folder / "work"), "--output", str(output),
         "--backends", *OURS, "transformers", "ctranslate2"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-4000:]
    with open(output, encoding="utf-8") as file:
        return done.stdout, json.load(file)


def test_json_fields(result):
    _, data = result
    assert data["machine"]["cpu"] and isinstance(data["machine"]["avx512_bf16"], bool)
    assert re.match(r"\d{4}-\d\d-\d\d", data["date"])
    assert data["threads"] == 1 and data["sentences"] == SETTINGS and data["max_length"] == 4
    assert data["model"]["hidden_dim"] == 16 and data["model"]["vocabulary_size"] >= 200
    methods = {(row["setting"], row["row"]) for row in data["rows"]}
    assert methods == {(setting, row) for setting in SETTINGS
                       for row in [*OURS, "transformers", "ctranslate2"]}
    for row in data["rows"]:
        assert len(row["seconds_runs"]) == 1 and row["seconds"] > 0
        sentences = SETTINGS[row["setting"]]
        assert row["sentences"] == sentences
        assert 0 < row["output_tokens"] <= 4 * sentences  # at most --max-length each
        assert row["sentences_per_second"] == pytest.approx(sentences / row["seconds"],
                                                            rel=1e-2)
        assert 0 <= row["same_as_transformers"] <= 1
        if row["row"] in ("transformers", "ctranslate2"):  # float32, the same decoding
            assert row["same_as_transformers"] == 1


def test_ratios_come_from_the_timings(result):
    _, data = result
    for setting in SETTINGS:
        rows = {row["row"]: row for row in data["rows"] if row["setting"] == setting}
        base = rows["transformers"]["seconds"]
        for row in rows.values():
            assert row["vs_transformers"] == pytest.approx(base / row["seconds"], rel=1e-2)
        goal = next(goal for goal in data["goals"] if goal["setting"] == setting)
        best = min((rows[name] for name in OURS), key=lambda row: row["seconds"])
        assert goal["fastest_ours"] == best["method"]
        assert goal["vs_transformers"] == pytest.approx(base / best["seconds"], rel=1e-2)
        assert goal["met"] == (goal["vs_transformers"] >= 2)
        assert goal["vs_ctranslate2"] == pytest.approx(
            rows["ctranslate2"]["seconds"] / best["seconds"], rel=1e-2)


def test_table_and_goal_lines(result):
    stdout, data = result
    assert "| setting | sentences | method | tokens/s | sentences/s | vs transformers" in stdout
    assert data["machine"]["cpu"] in stdout and "avx512_bf16: " in stdout
    for setting, sentences in SETTINGS.items():
        assert re.search(rf"ours ≥ 2x transformers \({setting}\): (met|missed) \(\d+\.\d\d\)",
                         stdout)
        assert re.search(rf"ours / CTranslate2 float32 \({setting}\): \d+\.\d\d", stdout)
        assert re.search(rf"\| {setting} \| {sentences} \| transformers generate \| [\d,.]+ \| "
                         r"[\d,.]+ \| "
                         r"1\.00x \| 100\.0% \|", stdout)
