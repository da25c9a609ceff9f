"""Where the templates and static files are.

Installed from a wheel (and inside the PyInstaller binary) they sit inside the
package as ``appliance/templates`` and ``appliance/static``; in a source
checkout they are the repository's top-level ``templates/`` and ``static/``.
"""

from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


@cache
def resource_dir(name: str) -> Path:
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"the appliance's {name}/ folder is missing from this installation")


def templates_dir() -> Path:
    return resource_dir("templates")


def static_dir() -> Path:
    return resource_dir("static")
