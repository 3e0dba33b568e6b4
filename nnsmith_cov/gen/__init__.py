"""GraphIR, Z3-backed graph generation (Algorithm 1) and attribute binning (Algorithm 2)."""
