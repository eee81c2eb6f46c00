"""`benchmarks/data_scale.py`: its corpora, its backup rewrite, and a run on a tiny corpus."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

BENCHMARKS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
sys.path.insert(0, BENCHMARKS)

SENTENCES = [
    ("Der Hund schläft.", "The dog sleeps."),
    ("Die Katze schläft.", "The cat sleeps."),
    ("Der Hund läuft schnell.", "The dog runs fast."),
    ("Die Katze läuft weg.", "The cat runs away."),
    ("Das Haus ist groß.", "The house is big."),
    ("Das Haus ist klein.", "The house is small."),
    ("Ich bin hier.", "I am here."),
    ("Wir sind hier.", "We are here."),
    ("Wie spät ist es?", "What time is it?"),
    ("Er ist krank.", "He is ill."),
    ("Guter Wein muss reifen.", "Good wine needs to mellow."),
    ("Das ist eine gute Idee.", "That is a good idea."),
    ("Wir fahren morgen nach Berlin.", "We are going to Berlin tomorrow."),
    ("Sie liest ein Buch.", "She reads a book."),
    ("Der Zug kommt spät.", "The train is late."),
    ("Es regnet heute.", "It is raining today."),
    ("Ich trinke gern Kaffee.", "I like drinking coffee."),
    ("Das Wetter ist schön.", "The weather is nice."),
    ("Wo ist der Bahnhof?", "Where is the station?"),
    ("Er spielt Gitarre.", "He plays the guitar."),
]
COLUMNS = {"pairs", "mean_english_words", "train_pairs", "prepare_s", "prepare_rss_mib",
           "train_first_step_s", "train_startup_s", "train_rss_mib", "resume_10_s",
           "resume_10_rss_mib", "resume_deep_s", "resume_deep_rss_mib", "deep_step",
           "batches_per_epoch", "resume_difference_s", "plan_s", "pipeline_tokens_per_s",
           "pipeline_tf_tokens_per_s", "pipeline_rss_mib"}


def test_corpus_pairs_are_distinct_aligned_recombinations_and_reused(tmp_path):
    from data_scale import write_corpus

    (english, german), mean_words = write_corpus(SENTENCES, 300, str(tmp_path))
    with open(english, encoding="utf-8") as file:
        sources = file.read().splitlines()
    with open(german, encoding="utf-8") as file:
        targets = file.read().splitlines()
    pairs = list(zip(sources, targets, strict=True))
    assert len(pairs) == len(set(pairs)) == 300
    german_of = {english: german for german, english in SENTENCES}
    parts = [re.split(r"(?<=[.?!]) ", source) for source in sources]
    assert {len(part) for part in parts} == {1, 2, 3}
    assert targets == [" ".join(german_of[english] for english in part) for part in parts]
    assert 0 < mean_words == pytest.approx(np.mean([len(s.split()) for s in sources]))
    before = os.path.getmtime(english)
    assert write_corpus(SENTENCES, 300, str(tmp_path))[1] == mean_words
    assert os.path.getmtime(english) == before  # reused, not rewritten
    with pytest.raises(ValueError, match="distinct"):
        write_corpus(SENTENCES[:2], 100, str(tmp_path / "few"))


def test_set_backup_step_rewrites_the_optimizer_step(tmp_path):
    import keras
    from data_scale import set_backup_step

    import keras_transformer as kt

    model = kt.build_transformer("tiny", vocabulary_size=50, num_layers=1)
    kt.compile_transformer(model)
    model.optimizer.build(model.trainable_variables)
    backup = tmp_path / "backup"
    backup.mkdir()
    model.save_weights(str(backup / "latest.weights.h5"))
    (backup / "training_metadata.json").write_text(json.dumps(
        {"step": 0, "data": {"epoch": 0, "batch": 0, "seed": 0, "batches_per_epoch": 4}}))
    set_backup_step(str(tmp_path), 1234)
    restored = kt.build_transformer("tiny", vocabulary_size=50, num_layers=1)
    kt.compile_transformer(restored)
    restored.optimizer.build(restored.trainable_variables)
    restored.load_weights(str(backup / "latest.weights.h5"))
    assert int(keras.ops.convert_to_numpy(restored.optimizer.iterations)) == 1234
    assert json.loads((backup / "training_metadata.json").read_text()) == {"step": 1234}


@pytest.mark.slow
def test_benchmark_runs_on_a_tiny_ding_corpus(tmp_path):
    corpus = tmp_path / "de-en"
    corpus.write_text("# tiny\nHund {m} | Hunde {pl} :: dog | dogs\n" + "".join(
        f"{german} :: {english}\n" for german, english in SENTENCES), encoding="utf-8")
    work = tmp_path / "work"
    done = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "data_scale.py"), "--sizes", "2000",
         "--corpus", str(corpus), "--preset", "tiny", "--tokens-per-batch", "512",
         "--pipeline-batches", "20", "--work", str(work)],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((work / "results.json").read_text())
    (row,) = results["rows"]
    assert COLUMNS <= set(row) and row["pairs"] == 2000
    assert all(row[name] > 0 for name in COLUMNS - {"resume_difference_s"})
    assert row["deep_step"] > 20 * row["batches_per_epoch"]
    assert results["model"]["preset"] == "tiny" and results["model"]["tokens_per_s"] > 0
    assert {"cpu", "cores", "avx512_bf16"} <= set(results["machine"])
    assert len(results["goals"]) == 7
    assert all(set(goal) == {"goal", "met", "figures"} for goal in results["goals"])
    table = (work / "results.md").read_text()
    assert table in done.stdout and "| 2,000 |" in table and "Goals:" in table
    assert "prepare" in done.stderr and "first step" in done.stderr  # progress lines
