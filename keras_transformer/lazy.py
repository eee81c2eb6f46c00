"""Package attributes that import their module only when first used (PEP 562).

The TensorFlow-only modules (the `tf.data` pipeline, SavedModel export, `tf.distribute`
training) stay unimported until a name from them is used, so `import keras_transformer`
runs without TensorFlow under `KERAS_BACKEND=jax` or `torch`.

Example:
>>> getattr_, dir_ = lazy_attributes("json", {"loads": "json"})
>>> getattr_("loads")('"ok"')
'ok'
"""

import importlib


def lazy_attributes(package, names):
    """`(__getattr__, __dir__)` for `package`, importing `names[attribute]` on first use.

    Args:
        package: str. The package's `__name__` (used in the error for unknown names).
        names: dict `attribute -> module`; the attribute is the module itself when its
            name is the module's last part and the module has no attribute of that name.
    """

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
