"""`make_dataset` under `tf.distribute.MirroredStrategy` over two logical CPU devices.

Logical devices must be configured before TensorFlow initializes, so the check runs in a
fresh interpreter.
"""

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2
    )
    import keras

    from keras_transformer.data import make_dataset, train_tokenizer

    pairs = [("Ich bin hier.", "I am here."), ("Wie spät ist es?", "What time is it?"),
             ("Hund", "dog"), ("Das ist eine gute Idee.", "That is a good idea.")] * 8
    tokenizer = train_tokenizer([text for pair in pairs for text in pair], vocabulary_size=60)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():  # so every batch size is a multiple of the 2 replicas
        dataset = make_dataset(
            pairs, tokenizer, tokens_per_batch=96, max_sequence_length=16, seed=0
        )

    sentences = 0
    for features, labels in strategy.experimental_distribute_dataset(dataset):
        parts = strategy.experimental_local_results(labels)
        assert len(parts) == 2
        encoders = strategy.experimental_local_results(features["encoder_token_ids"])
        for encoder, part in zip(encoders, parts):
            assert encoder.shape[0] == part.shape[0] == parts[0].shape[0] > 0
            assert part.dtype == tf.int32
        sentences += sum(int(part.shape[0]) for part in parts)
    assert len(pairs) - 4 <= sentences <= len(pairs), sentences  # odd remainders trimmed

    vocabulary_size = tokenizer.vocabulary_size
    with strategy.scope():
        encoder_ids = keras.Input((None,), dtype="int32", name="encoder_token_ids")
        decoder_ids = keras.Input((None,), dtype="int32", name="decoder_token_ids")
        embedding = keras.layers.Embedding(vocabulary_size, 8)
        context = keras.ops.mean(embedding(encoder_ids), axis=1, keepdims=True)
        logits = keras.layers.Dense(vocabulary_size)(embedding(decoder_ids) + context)
        model = keras.Model({"encoder_token_ids": encoder_ids,
                             "decoder_token_ids": decoder_ids}, logits)
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(dataset, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2
    print("distributed ok", sentences)
    """
)


def test_mirrored_strategy_over_two_cpus():
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "distributed ok" in result.stdout
