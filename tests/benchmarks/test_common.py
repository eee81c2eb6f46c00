"""`benchmarks/common.py`: its examples, a worker process's round trip, the goals table;
and `ctranslate2_speed.py` on a tiny model, every row started in its own worker."""

import doctest
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCHMARKS = os.path.join(ROOT, "benchmarks")
sys.path.insert(0, BENCHMARKS)

# A worker that doubles numbers, a pass sleeping 10 ms a batch.
ECHO = """import sys, time
sys.path.insert(0, sys.argv[1])
from common import Row, serve
def decode(items, factor):
    time.sleep(0.01)
    return [factor * item for item in items]
serve(lambda: Row(decode, prepare=lambda item: item + 1, lengths=lambda items: items,
                  info={"kind": "echo"}))
"""
BROKEN = "import sys; sys.path.insert(0, sys.argv[1]); from common import serve\n" \
         "def build(): raise ValueError('no such option')\nserve(build)\n"


def test_docstring_examples():
    import common

    failed, attempted = doctest.testmod(common)
    assert attempted > 0 and failed == 0


def test_workers_take_turns_and_a_failing_row_is_reported(tmp_path):
    from common import Worker, batches_by_length, worker_rounds

    workers = {name: Worker(name, [sys.executable, "-c", code, BENCHMARKS],
                            str(tmp_path / f"{name}.log"))
               for name, code in (("a", ECHO), ("b", ECHO), ("broken", BROKEN))}
    try:
        assert workers["a"].receive() == {"ready": True, "kind": "echo"}
        assert workers["b"].receive()["kind"] == "echo"
        with pytest.raises(RuntimeError, match="(?s)broken failed:.*no such option"):
            workers["broken"].receive()
        workers.pop("broken").close()
        for worker in workers.values():
            assert worker.call(sources=[3, 1, 2]) == {"sources": 3, "lengths": [3, 1, 2]}
        message = {"factor": 2, "batches": batches_by_length([3, 1, 2], 2)}
        seconds, outputs = worker_rounds(workers, message, repeats=3, name="test")
        assert outputs == {"a": [8, 4, 6], "b": [8, 4, 6]}  # (source + 1) x 2
        assert all(len(times) == 3 and min(times) >= 0.02 for times in seconds.values())
    finally:
        for worker in workers.values():
            worker.close()


def test_goals_table_and_run_goals():
    import run
    from common import Goal, goals_table

    rows = {"rows": [
        {"decoding": "greedy", "batch_size": 1, "method": run.OURS, "sentences_per_second": 10,
         "target_tokens_per_second": 100},
        {"decoding": "greedy", "batch_size": 1, "method": run.CT2_FLOAT32,
         "sentences_per_second": 8, "target_tokens_per_second": 80},
        {"decoding": "greedy", "batch_size": 1, "method": run.SAVED_MODEL,
         "sentences_per_second": 8.5, "target_tokens_per_second": 85}],
        "skipped": {run.INT8: "TypeError: unexpected keyword argument 'quantization'"}}
    results = {"ctranslate2": rows,
               "data_scale": {"path": "d.json", "goals": [
                   {"goal": "prepare within 10 minutes", "met": True, "figures": "80 s"}]},
               "pretrained_speed": {"path": "p.json", "goals": [
                   {"setting": "greedy b1", "fastest_ours": "ours, JAX (jit)",
                    "vs_transformers": 2.5, "met": True, "vs_ctranslate2": 0.8}]}}
    goals = "\n".join(goals_table(run.goal_rows(results)))
    assert ("| decoding, ours (XLA) / CTranslate2 float32, greedy at batch 1, by sentences/s "
            "on the same sentences | 1.25 | >= 1 | met |") in goals
    assert ("| decoding, the SavedModel / ours in-process, greedy at batch 1, by sentences/s "
            "on the same sentences | 0.85 | >= 0.9 | missed |") in goals
    assert "| decoding row ours, int8 (XLA): skipped, TypeError" in goals
    assert "| data scale: prepare within 10 minutes (d.json, run alone) | 80 s |" in goals
    assert "| OPUS-MT size, ours / transformers generate (greedy b1) (p.json, run alone; " \
        "fastest: ours, JAX (jit)) | 2.50x | >= 2x | met |" in goals
    assert goals.count("| goal | measured |") == 1  # one table
    text = run.markdown({"data_scale": results["data_scale"]})
    assert text.rstrip().endswith("| 80 s | as stated | met |")  # the goals table ends it
    assert goals_table([Goal("x", 3.0, 2.0, at_most=True)])[-1] == "| x | 3.00x | <= 2x | missed |"


@pytest.mark.slow
def test_ctranslate2_speed_starts_every_row(tmp_path):
    """A tiny trained model, 4 sentences, 1 round: every row decodes or says why not."""
    sys.path.insert(0, ROOT)
    from tests.export.conftest import SENTENCES, write_model_dir

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    write_model_dir(model_dir)
    data = tmp_path / "test.tsv"
    data.write_text("".join(f"{SENTENCES[i]}\t{SENTENCES[i + 1]}\n" for i in range(0, 8, 2)),
                    encoding="utf-8")
    output = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "ctranslate2_speed.py"), "--model",
         str(model_dir), "--data", str(data), "--settings", "1x1", "4x2", "--repeats", "1",
         "--max-length", "8", "--threads", "1", "--work-dir", str(tmp_path / "work"),
         "--output", str(output)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(output.read_text())
    import ctranslate2_speed as speed

    ran = {row["method"] for row in result["rows"]}
    assert ran | set(result["skipped"]) == set(speed.LABELS.values())
    assert speed.OURS in ran and all(result["skipped"].values())  # each with its reason
    for row in result["rows"]:
        assert row["sentences_per_second"] > 0 and 0 <= row.get("same_as_ours", 1) <= 1
    assert next(row for row in result["rows"] if row["method"] == speed.OURS)[
        "same_as_ours"] == 1
    assert "| decoding | batch | method | tokens/s | sentences/s |" in done.stdout
