"""The dashboard sections that later parts of the appliance fill in, and what each will show.

Every section has its own pages now (Billing and Payments: billing/ui_routes.py); a new part of the
appliance may add a placeholder here until its pages exist.
"""

from __future__ import annotations

from typing import NamedTuple


class Section(NamedTuple):
    slug: str
    title: str
    level: str
    summary: str
    coming: tuple[str, ...]


SECTIONS: tuple[Section, ...] = ()
