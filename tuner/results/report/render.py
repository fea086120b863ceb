"""The report's markup: Jinja templates shipped with the package (`templates/*.html.j2`),
rendered with autoescape, so every value is escaped unless it is markup already (a plotly
figure's div, a section rendered by another template). Python computes the words and figures;
the templates place them."""

from __future__ import annotations

import jinja2
from markupsafe import Markup

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("tuner.results.report", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,  # a name the template uses and no caller gives: an error
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


def render(template: str, **values: object) -> Markup:
    """`template` (a file under templates/) rendered with `values`."""
    return Markup(_ENV.get_template(template).render(**values))


def macro(template: str, name: str, **values: object) -> Markup:
    """The macro `name` of `template` called with `values`: one section of the page."""
    return Markup(getattr(_ENV.get_template(template).module, name)(**values))
