"""Exports: a SavedModel with a translate signature, for TensorFlow Serving
(TensorFlow-specific), and a CTranslate2 model folder (needs `ctranslate2`).

Example:
```python
import keras_transformer as kt
from keras_transformer.export import export_ctranslate2

kt.export_saved_model("runs/base", "exports/base/1", beam_size=4, alpha=0.6)
export_ctranslate2("runs/base", "exports/base-ct2", quantization="int8")
```
"""

from typing import TYPE_CHECKING

from keras_transformer.lazy import lazy_attributes

if TYPE_CHECKING:  # static tools (docs, IDEs) see the names; they load lazily
    from keras_transformer.export.ctranslate2 import export_ctranslate2
    from keras_transformer.export.saved_model import SIGNATURES, export_saved_model


__getattr__, __dir__ = lazy_attributes(__name__, {
    "saved_model": ["SIGNATURES", "export_saved_model"],
    "ctranslate2": ["export_ctranslate2"],
})

__all__ = ["SIGNATURES", "export_ctranslate2", "export_saved_model"]
