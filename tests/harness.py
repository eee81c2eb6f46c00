"""Shared checks for layers, schedules and losses (Keras' own TestCase is private API)."""

import keras
import numpy as np


def assert_layer_contract(layer, *inputs, fit=True, **call_kwargs):
    """Config round trip, eager and symbolic calls agree on shape, one `fit` step runs.

    `fit=False` skips the training step for layers whose output has no batch axis.
    """
    eager = layer(*inputs, **call_kwargs)
    eager = eager[0] if isinstance(eager, tuple) else eager
    clone = layer.__class__.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    assert tuple(layer.compute_output_shape(*[x.shape for x in inputs])) == tuple(eager.shape)

    symbolic_inputs = [keras.Input(x.shape[1:], dtype=str(np.asarray(x).dtype)) for x in inputs]
    symbolic = clone(*symbolic_inputs, **call_kwargs)
    symbolic = symbolic[0] if isinstance(symbolic, tuple) else symbolic
    assert tuple(symbolic.shape[1:]) == tuple(eager.shape[1:])

    if not fit:
        return eager
    model = keras.Model(symbolic_inputs, symbolic)
    model.compile(optimizer="sgd", loss="mse")
    model.fit(list(inputs), np.zeros(eager.shape, "float32"), epochs=1, verbose=0)
    return eager


def assert_serializable(obj):
    """`get_config` round trip and Keras (de)serialization without `custom_objects`."""
    restored = obj.__class__.from_config(obj.get_config())
    assert restored.get_config() == obj.get_config()
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(obj))
    assert type(revived) is type(obj)
    assert revived.get_config() == obj.get_config()
    return revived


def snapshot_seeds(model):
    """Values of every non-trainable variable (dropout seed states included), and on
    PyTorch its global generator (Keras' unseeded dropout draws from it there)."""
    values = [keras.ops.convert_to_numpy(v) for v in model.non_trainable_variables]
    if keras.backend.backend() == "torch":
        import torch

        values.append(torch.get_rng_state())
    return values


def restore_seeds(model, values):
    if keras.backend.backend() == "torch":
        import torch

        torch.set_rng_state(values[-1])
        values = values[:-1]
    for variable, value in zip(model.non_trainable_variables, values, strict=True):
        variable.assign(value)
