"""CLI commands, one module per area; imports of heavy packages stay inside functions."""
