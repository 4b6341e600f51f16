"""YAML for experiment files: exponent numbers are floats, duplicate keys are errors."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

__all__ = ["parse_yaml", "dump_yaml"]


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads `1e-4` as a float (YAML 1.2) and refuses duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (a later value would silently replace the first)", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str) -> Any:
    """Parse YAML text with the experiment loader (`1e-4` is a float)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader


def dump_yaml(config: Mapping[str, Any]) -> str:
    """The YAML text of a resolved config (reads back to the same config)."""
    return yaml.safe_dump(dict(config), sort_keys=False, default_flow_style=False)
