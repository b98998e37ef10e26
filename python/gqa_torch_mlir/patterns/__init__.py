"""ONNX op lowerings, one module per ONNX op.

Every module in this package is imported here, so adding a lowering is one
new file whose function carries one ``@onnx_op(...)`` registration line.
"""

import importlib
import pkgutil

for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
