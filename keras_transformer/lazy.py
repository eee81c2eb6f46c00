"""Package attributes that import their module only when first used (PEP 562).

The TensorFlow-only modules (the `tf.data` pipeline, SavedModel export, `tf.distribute`
training) stay unimported until a name from them is used, so `import keras_transformer`
runs without TensorFlow under `KERAS_BACKEND=jax` or `torch`.

Example:
>>> getattr_, dir_ = lazy_attributes("json", {"decoder": ["JSONDecodeError"]})
>>> getattr_("JSONDecodeError").__name__, dir_()
('JSONDecodeError', ['JSONDecodeError'])
"""

import importlib


def lazy_attributes(package, modules):
    """`(__getattr__, __dir__)` for `package`, importing a submodule on first use.

    Args:
        package: str. The package's `__name__`.
        modules: dict `submodule -> list of attribute names` it provides; a name that
            is the submodule's own name and not an attribute of it is the submodule.
    """
    names = {name: f"{package}.{module}" for module, attributes in modules.items()
             for name in attributes}

    def __getattr__(name):
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(names[name])
        if module.__name__.rsplit(".", 1)[-1] == name and not hasattr(module, name):
            return module
        return getattr(module, name)

    def __dir__():
        return sorted(names)

    return __getattr__, __dir__
