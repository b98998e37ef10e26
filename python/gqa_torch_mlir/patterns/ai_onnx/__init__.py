"""Default-domain ONNX ops: lowerings that replace torch-mlir's, and run-time guards around its own."""
