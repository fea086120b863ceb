"""CLI commands, one module per area.

The one place where function-local imports are deliberate: `tuner --help`, and the one-line
errors for bad input, must not wait for optuna, pandas, plotly, transformers or the study
loop to import, so each command imports what it uses inside its function. Everywhere else in
`tuner/`, imports sit at the top of the module, apart from three slow, optional or ordered
ones that say why where they are (transformers, matplotlib, pynvml).
"""
