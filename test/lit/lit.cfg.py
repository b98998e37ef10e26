# lit configuration for gqa-torch-mlir's FileCheck tests.
#
# Run through CMake (`cmake --build build --target check-gqa-torch-mlir`), whose
# generated lit.site.cfg.py sets the tool paths, or directly with
# `lit test/lit`, which takes the tools from the Python running lit.
import os
import shutil
import sys

import lit.formats

config.name = "GQA_TORCH_MLIR"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = getattr(config, "gqa_test_exec_root", None) or os.path.join(config.test_source_root, "Output")

python = getattr(config, "gqa_python", None) or sys.executable
bin_dir = getattr(config, "gqa_bin_dir", None) or os.path.dirname(python)


def tool(name):
    path = os.path.join(bin_dir, name)
    found = path if os.path.exists(path) else shutil.which(name)
    if not found:
        lit_config.fatal(f"'{name}' not found next to {python} nor on PATH: pip install -e '.[test]'")
    return found


config.substitutions.append(("%PYTHON", python))
config.substitutions.append(("gqa-torch-mlir-opt", tool("gqa-torch-mlir-opt")))
config.substitutions.append(("FileCheck", tool("filecheck")))
config.environment["PYTHONUNBUFFERED"] = "1"
