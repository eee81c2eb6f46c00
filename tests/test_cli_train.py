"""`train`, `evaluate`, `translate` and `average` end to end on a tiny prepared corpus."""

import dataclasses
import io
import json
import os

import pytest

from keras_transformer.allocator import running_allocator
from keras_transformer.cli import main
from keras_transformer.data import load_tsv
from keras_transformer.training import TrainingConfig, list_checkpoints


def _json_line(capsys):
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.slow
def test_train_resume_evaluate_translate_average(tiny_data_dir, tmp_path, capsys, monkeypatch):
    data_dir, model_dir = tiny_data_dir, str(tmp_path / "model")
    common = ["train", "--data", data_dir, "--output", model_dir, "--preset", "tiny",
              "--tokens-per-batch", "128", "--max-sequence-length", "16",
              "--checkpoint-every", "2", "--warmup-steps", "10", "--bleu-every", "2",
              "--normalize-first"]
    assert main(common + ["--max-steps", "4"]) == 0
    first = _json_line(capsys)
    assert first["step"] == 4 and len(first["bleu"]) == 2
    for name in ("model.keras", "tokenizer.model", "config.json", "history.csv"):
        assert os.path.exists(os.path.join(model_dir, name))
    with open(os.path.join(model_dir, "config.json")) as file:
        content = json.load(file)
    assert content["allocator"] == running_allocator()  # "tcmalloc" under `make test`
    saved = content["training"]
    assert set(saved) == {field.name for field in dataclasses.fields(TrainingConfig)}
    assert saved["model_overrides"] == {"normalize_first": True}
    assert saved["warmup_steps"] == 10 and saved["label_smoothing"] == 0.1

    assert main(common + ["--max-steps", "6"]) == 0  # resumes from backup/, not from 0
    assert _json_line(capsys)["step"] == 6
    assert [step for step, _ in list_checkpoints(os.path.join(model_dir, "checkpoints"))] == [
        2, 4, 6]

    assert main(["evaluate", "--model", model_dir, "--data", data_dir, "--method",
                 "greedy", "--max-length", "8"]) == 0
    scores = _json_line(capsys)
    assert {"bleu", "chrf", "signature", "sentences"} <= set(scores)
    assert scores["sentences"] == len(load_tsv(os.path.join(data_dir, "test.tsv")))

    monkeypatch.setattr("sys.stdin", io.StringIO("Der Hund schläft.\n\nIch bin hier.\n"))
    assert main(["translate", "--model", model_dir, "--method", "greedy",
                 "--max-length", "8"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3  # one line out per line in

    export_dir = str(tmp_path / "export")
    assert main(["export", "--model", model_dir, "--output", export_dir, "--beam-size", "2",
                 "--max-length", "8"]) == 0
    assert os.path.exists(os.path.join(export_dir, "saved_model.pb"))

    assert main(["average", "--model", model_dir, "--last", "2"]) == 0
    assert _json_line(capsys)["averaged_steps"] == [4, 6]
    assert os.path.exists(os.path.join(model_dir, "model.unaveraged.keras"))


def test_resume_refuses_a_flag_that_contradicts_the_saved_recipe(tiny_data_dir, tmp_path,
                                                                 capsys):
    model_dir = str(tmp_path / "model")
    common = ["train", "--data", tiny_data_dir, "--output", model_dir, "--preset", "tiny",
              "--tokens-per-batch", "128", "--max-sequence-length", "16",
              "--checkpoint-every", "2", "--bleu-every", "0"]
    assert main(common + ["--max-steps", "2", "--warmup-steps", "100"]) == 0
    capsys.readouterr()
    backup = os.listdir(os.path.join(model_dir, "backup"))
    assert main(common + ["--max-steps", "4", "--warmup-steps", "4000",
                          "--label-smoothing", "0.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--label-smoothing (`label_smoothing`): saved 0.1, given 0.0" in err
    assert "--warmup-steps (`warmup_steps`): saved 100, given 4000" in err
    assert "fresh --output folder" in err
    assert os.listdir(os.path.join(model_dir, "backup")) == backup  # no work was done
    # Without them, the saved recipe goes on (and the run's length may change).
    assert main(common + ["--max-steps", "4"]) == 0
    assert _json_line(capsys)["step"] == 4


def test_a_run_resumed_between_checkpoints_validates_at_the_same_steps(
        tiny_data_dir, tmp_path, capsys):
    model_dir = tmp_path / "model"
    common = ["train", "--data", tiny_data_dir, "--output", str(model_dir), "--preset", "tiny",
              "--tokens-per-batch", "128", "--max-sequence-length", "16",
              "--checkpoint-every", "4", "--backup-minutes", "0", "--bleu-every", "0"]
    assert main(common + ["--max-steps", "3"]) == 0
    assert _json_line(capsys)["step"] == 3
    metadata = json.loads((model_dir / "backup" / "training_metadata.json").read_text())
    assert metadata["step"] == 3  # a timed backup (every step with 0 minutes)
    assert list_checkpoints(str(model_dir / "checkpoints")) == []

    assert main(common + ["--max-steps", "8"]) == 0
    result = _json_line(capsys)
    assert (result["resumed_from"], result["step"]) == (3, 8)
    assert result["seconds"] > 0  # the time in `fit`, which the quality benchmark plots
    # The resumed run trains 1 step to the epoch boundary, then a whole epoch: validation
    # and checkpoints come at steps 4 and 8, as in an uninterrupted run.
    assert [step for step, _ in list_checkpoints(str(model_dir / "checkpoints"))] == [4, 8]
    text = (model_dir / "history.csv").read_text().strip().splitlines()
    header, rows = text[0].split(","), [row.split(",") for row in text[1:]]
    assert [row[header.index("epoch")] for row in rows] == ["0", "0", "1"]
    assert all(row[header.index("val_loss")] not in ("", "NA") for row in rows)


def test_an_older_config_json_still_resumes(tiny_data_dir, tmp_path, capsys, caplog):
    model_dir = tmp_path / "model"
    common = ["train", "--data", tiny_data_dir, "--output", str(model_dir), "--preset", "tiny",
              "--tokens-per-batch", "128", "--max-sequence-length", "16",
              "--checkpoint-every", "2", "--bleu-every", "0"]
    assert main(common + ["--max-steps", "2"]) == 0
    config = json.loads((model_dir / "config.json").read_text())
    legacy = {"preset": "tiny", "model_overrides": {}, "vocabulary_size":
              config["vocabulary_size"], "max_sequence_length": 16, "tokens_per_batch": 128,
              "precision": "float32", "data_dir": config["data_dir"], "sentences_only": False}
    (model_dir / "config.json").write_text(json.dumps(legacy))
    capsys.readouterr()
    assert main(common + ["--max-steps", "4"]) == 0
    assert _json_line(capsys)["step"] == 4
    assert "predates saved training settings" in caplog.text and "warmup_steps=4000" in caplog.text
    assert "training" in json.loads((model_dir / "config.json").read_text())


def test_train_on_a_folder_without_data_is_a_one_line_error(tmp_path, capsys):
    assert main(["train", "--data", str(tmp_path), "--output", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("keras-transformer: error: ") and "train.tsv" in err[-1]


def test_every_command_has_help(capsys):
    for command in ("prepare", "train", "evaluate", "translate", "average", "export", "demo"):
        with pytest.raises(SystemExit) as raised:
            main([command, "--help"])
        assert raised.value.code == 0
        assert "usage: keras-transformer" in capsys.readouterr().out


def test_the_command_line_prints_no_framework_start_up_lines(tiny_data_dir, tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("KT_FRAMEWORK_LOGS", None)
    done = subprocess.run(
        [sys.executable, "-m", "keras_transformer.cli", "train", "--data", tiny_data_dir,
         "--output", str(tmp_path / "model"), "--preset", "tiny", "--tokens-per-batch", "128",
         "--max-sequence-length", "16", "--max-steps", "1", "--checkpoint-every", "1",
         "--bleu-every", "0"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["step"] == 1
    for marker in ("I0000", "E0000", "W0000", "absl::InitializeLog", "cuInit", "oneDNN"):
        assert marker not in done.stderr, done.stderr[-2000:]
    assert "shuffle" not in done.stderr  # Keras' warning about fit(shuffle=True)
