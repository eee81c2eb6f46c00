import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.harness import restore_seeds, snapshot_seeds

VOCAB = 30


def _tiny(**overrides):
    keras.utils.set_random_seed(0)
    return kt.build_transformer("tiny", vocabulary_size=VOCAB, **overrides)


def _ids(shape, seed=0, low=4):
    return np.random.default_rng(seed).integers(low, VOCAB, size=shape).astype("int32")


def _logits(model, src, tgt, training=False):
    return keras.ops.convert_to_numpy(model({"encoder_token_ids": src, "decoder_token_ids": tgt},
                            training=training))


@pytest.mark.parametrize("preset, low, high", [("base", 60e6, 66e6), ("big", 205e6, 220e6)])
def test_parameter_counts_match_table_3(preset, low, high):
    model = kt.build_transformer(preset, vocabulary_size=37000)
    assert low <= model.count_params() <= high


def test_presets_are_table_3():
    assert kt.PRESETS["base"] == dict(num_layers=6, hidden_dim=512, intermediate_dim=2048,
                                      num_heads=8, dropout=0.1)
    assert kt.PRESETS["big"] == dict(num_layers=6, hidden_dim=1024, intermediate_dim=4096,
                                     num_heads=16, dropout=0.3)


def test_output_shape_and_tied_embedding():
    model = _tiny()
    assert _logits(model, _ids((2, 7)), _ids((2, 5), 1)).shape == (2, 5, VOCAB)
    embeddings = [w for w in model.weights if w.path.endswith("embeddings")]
    assert len(embeddings) == 1


@pytest.mark.parametrize("attention_dropout", [0.0, 0.2])
def test_future_decoder_tokens_do_not_change_earlier_outputs_even_with_dropout(attention_dropout):
    model = _tiny(dropout=0.3, attention_dropout=attention_dropout)
    src, tgt = _ids((2, 6)), _ids((2, 8), 1)
    changed = tgt.copy()
    changed[:, 4:] = _ids((2, 4), 2)
    for training in (False, True):
        seeds = snapshot_seeds(model)
        before = _logits(model, src, tgt, training)
        restore_seeds(model, seeds)
        after = _logits(model, src, changed, training)
        np.testing.assert_allclose(before[:, :4], after[:, :4], atol=1e-5)
        assert not np.allclose(before[:, 4:], after[:, 4:])


def test_source_padding_changes_nothing():
    model = _tiny()
    src, tgt = _ids((2, 5)), _ids((2, 6), 1)
    src[1, 3:] = 0
    reference = _logits(model, src, tgt)
    padded = np.concatenate([src, np.zeros((2, 4), "int32")], axis=1)
    np.testing.assert_allclose(_logits(model, padded, tgt), reference, atol=1e-5)


def test_encoder_states_under_the_pad_mask_change_nothing():
    model = _tiny()
    src, tgt = _ids((1, 6)), _ids((1, 4), 1)
    src[:, 4:] = 0
    encoded = np.array(model.encode(src))
    reference = keras.ops.convert_to_numpy(model.decode(tgt, encoded, src != 0))
    encoded[:, 4:] = np.random.default_rng(3).normal(size=(1, 2, encoded.shape[-1]))
    changed = keras.ops.convert_to_numpy(model.decode(tgt, encoded, src != 0))
    np.testing.assert_allclose(changed, reference, atol=1e-5)
    np.testing.assert_allclose(_logits(model, src, tgt), reference, atol=1e-5)


def test_fully_padded_rows_give_no_nan():
    model = _tiny()
    src = np.zeros((2, 5), "int32")
    tgt = np.zeros((2, 4), "int32")
    tgt[0, 0] = kt.START_ID
    assert np.all(np.isfinite(_logits(model, src, tgt)))
    assert np.all(np.isfinite(_logits(model, src, tgt, training=True)))


def test_save_and_load_give_identical_outputs(tmp_path):
    model = _tiny(normalize_first=True, position_embedding="learned", max_sequence_length=16)
    src, tgt = _ids((2, 7)), _ids((2, 5), 1)
    path = tmp_path / "m.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    assert isinstance(restored, kt.Transformer)
    assert restored.get_config() == model.get_config()
    np.testing.assert_array_equal(_logits(restored, src, tgt), _logits(model, src, tgt))


def test_encoder_and_decoder_sub_models_share_weights():
    model = _tiny()
    src, tgt = _ids((2, 7)), _ids((2, 5), 1)
    encoded = keras.ops.convert_to_numpy(model.encoder_model(src))
    logits = model.decoder_model({"decoder_token_ids": tgt, "encoder_sequence": encoded,
                                  "encoder_padding_mask": src != 0})
    np.testing.assert_allclose(keras.ops.convert_to_numpy(logits), _logits(model, src, tgt),
                               atol=1e-5)


def test_decode_step_with_cache_equals_full_decode():
    model = _tiny()
    src, tgt = _ids((2, 7)), _ids((2, 6), 1)
    full = _logits(model, src, tgt)
    encoded = model.encode(src)
    cache = model.init_cache(encoded, max_length=8)
    steps = []
    for i in range(6):
        logits, cache = model.decode_step(tgt[:, i : i + 1], i, cache, src != 0)
        steps.append(keras.ops.convert_to_numpy(logits))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-4)


def test_attention_weights_for_every_layer_and_head():
    model = _tiny()
    weights = model.attention_weights(_ids((1, 7)), _ids((1, 5), 1))
    assert len(weights["cross_attention"]) == 2
    assert tuple(weights["cross_attention"][0].shape) == (1, 4, 5, 7)
    assert tuple(weights["encoder_self_attention"][1].shape) == (1, 4, 7, 7)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"hidden_dim": 60, "num_heads": 8},
         "`hidden_dim` (60) must be divisible by `num_heads` (8)"),
        ({"num_layers": 0}, "Received: num_layers=0"),
        ({"intermediate_dim": -1}, "Received: intermediate_dim=-1"),
        ({"dropout": 1.0}, "`dropout` must be in [0, 1). Received: dropout=1.0"),
        ({"dropout": -0.1}, "Received: dropout=-0.1"),
        ({"position_embedding": "rotary"}, "Received: position_embedding='rotary'"),
    ],
)
def test_invalid_configurations_name_the_argument(overrides, message):
    import re

    with pytest.raises(ValueError, match=re.escape(message)):
        kt.build_transformer("base", vocabulary_size=100, **overrides)


def test_unknown_preset():
    with pytest.raises(ValueError, match="`preset` must be one of"):
        kt.build_transformer("huge", vocabulary_size=100)
