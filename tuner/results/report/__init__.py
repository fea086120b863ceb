"""`tuner report`: one self-contained HTML file (plotly.js inlined) that opens offline.

stored trials → the Pareto front's data (`front`, computed once for both renderers) → figures
(`plots`: plotly, and the matplotlib PNG; `load`: latency against load, capacity per trial,
the scenario table) → the page (`page.build_report`: tables, the best commands, hosts,
predictions).

Modules: `page` (`build_report`), `deploy` ("What to deploy": `export`'s choice, change and
verdicts), `plots` (`plot_pareto`), `png` (`write_png`), `load`, `front`
(`layout`: the plot's axes, labels and colours), `render` (the markup: Jinja templates under
`templates/`, autoescaped; the sections above give them words and figures).

What may be assumed: the report only reads; every simulated figure in it says SIMULATED.

Re-exported here: the page and the PNG, what `tuner report` calls. They load pandas and
plotly, but only the report imports this package (matplotlib stays inside `write_png`).
"""

from tuner.results.report.front import ParetoFrontInfo, pareto_front_info
from tuner.results.report.page import build_report
from tuner.results.report.png import write_png

__all__ = ["ParetoFrontInfo", "build_report", "pareto_front_info", "write_png"]
