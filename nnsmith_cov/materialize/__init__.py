"""GraphIR -> torch.nn.Module, and its ONNX export."""
