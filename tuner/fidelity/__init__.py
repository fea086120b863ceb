"""fidelity."""
