"""Replay: re-run corpora, bug bundles and other tools' ONNX models under a collector into a campaign corpus."""
