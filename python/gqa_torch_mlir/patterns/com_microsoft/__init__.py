"""onnxruntime's contrib ops (domain com.microsoft), one module or package per op."""
