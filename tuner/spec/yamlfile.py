"""YAML for user files: PyYAML's safe loader, minus last-wins duplicate keys and deep nesting.

PyYAML accepts `a: 1` twice (the last wins, silently) and composes nested nodes
recursively (10 000 nested lists raise RecursionError, not a YAML error). Both are
refused here as `yaml.YAMLError`s with the line they occur on.
"""

from __future__ import annotations

from collections.abc import Hashable

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node

MAX_DEPTH = 64  # a study file nests about 5 levels deep
_MERGE = "tag:yaml.org,2002:merge"


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys in a mapping and nesting over MAX_DEPTH."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, object]:
        if isinstance(node, MappingNode):
            seen: set[Hashable] = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:  # `<<: *base`: explicit keys may override it
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # unhashable: the base constructor reports it
                if duplicate:
                    raise ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
        return super().construct_mapping(node, deep=deep)


def load(text: str) -> object:
    """One YAML document, as `yaml.safe_load` reads it, with the checks above."""
    loader = StrictLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
