"""The differential oracle: output comparison, symptoms, signatures, bug bundles."""
