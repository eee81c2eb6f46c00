"""Every public class and function has a docstring with a runnable `>>>` example.

"Public" means listed in `keras_transformer.__all__` or a subpackage's `__all__`, plus
the functions of public modules listed there (such as `keras_transformer.layers.masking`)
and of `MODULES` (such as `keras_transformer.evaluation`).
The examples themselves run as doctests (`pytest --doctest-modules keras_transformer`).
"""

import importlib
import inspect

import pytest

import keras_transformer

SUBPACKAGES = (
    "data",
    "export",
    "generation",
    "layers",
    "losses",
    "metrics",
    "models",
    "optimizers",
    "training",
)
# Public modules outside `__all__` whose functions are documented in the API reference.
MODULES = ("evaluation", "allocator")


def _public_names(module):
    """`(qualified name, object)` of the names `module` exports."""
    names = getattr(module, "__all__", None)
    if names is None:  # a public module without `__all__`: what it defines itself
        names = [
            name
            for name, value in vars(module).items()
            if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
        ]
    return [(f"{module.__name__}.{name}", getattr(module, name)) for name in names]


def public_objects():
    """Every public class and function of the package, once each, by its first name."""
    found, seen = {}, set()
    modules = [keras_transformer] + [
        importlib.import_module(f"keras_transformer.{name}") for name in SUBPACKAGES + MODULES
    ]
    while modules:
        module = modules.pop(0)
        for name, value in _public_names(module):
            if inspect.ismodule(value):
                if value.__name__.startswith("keras_transformer.") and value not in modules:
                    modules.append(value)
            elif (inspect.isclass(value) or inspect.isfunction(value)) and id(value) not in seen:
                seen.add(id(value))
                found[name] = value
    return found


PUBLIC = public_objects()


def test_the_walk_finds_the_public_api():
    for name in ("keras_transformer.Transformer", "keras_transformer.generate",
                 "keras_transformer.data.make_dataset", "keras_transformer.training.train",
                 "keras_transformer.layers.masking.causal_mask",
                 "keras_transformer.evaluation.score_translations"):
        assert name in PUBLIC
    assert len(PUBLIC) > 50


def test_every_subpackage_is_exported():
    assert set(SUBPACKAGES) <= set(keras_transformer.__all__)


def test_every_exported_name_exists():
    for module in [keras_transformer] + [getattr(keras_transformer, n) for n in SUBPACKAGES]:
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert not missing, f"{module.__name__}.__all__ names missing objects: {missing}"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_object_has_docstring_with_example(name):
    doc = inspect.getdoc(PUBLIC[name])
    assert doc, f"`{name}` has no docstring."
    assert ">>>" in doc, (
        f"`{name}`'s docstring has no runnable example: add an `Example:` section with "
        "`>>>` lines (it runs as a doctest)."
    )
