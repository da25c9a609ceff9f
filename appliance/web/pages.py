"""Dashboard pages that belong to no single domain: the overview and the section shells."""

from __future__ import annotations

from litestar import Request, get
from litestar.response import Redirect, Template

from appliance import __version__
from appliance.accounts import enrolment, users
from appliance.accounts.auth import PUBLIC, USER, access
from appliance.web.rendering import page
from appliance.web.sections import SECTIONS

_BY_SLUG = {s.slug: s for s in SECTIONS}


@get("/", opt=access(PUBLIC), include_in_schema=False)
async def root() -> Redirect:
    return Redirect(path="/ui", status_code=303)


@get("/ui", opt=access(USER), include_in_schema=False)
async def overview(request: Request) -> Template:
    stats = None
    if request.user.is_admin:
        links = await enrolment.list_all()
        stats = {
            "accounts": await users.count_by_role(),
            "active_links": sum(1 for link in links if link.status == "active"),
        }
    sections = [s for s in SECTIONS if _allowed(request, s.level)]
    return page(request, "web/overview.html", stats=stats, sections=sections, version=__version__)


def _allowed(request: Request, level: str) -> bool:
    return level == USER or request.user.role in ("admin", "coordinator")


def _section_handler(slug: str):
    section = _BY_SLUG[slug]

    async def handler(request: Request) -> Template:
        return page(request, "web/section.html", section=section)

    handler.__name__ = f"section_{slug}"
    return get(f"/ui/{slug}", opt=access(section.level), include_in_schema=False, name=f"section-{slug}")(handler)


ROUTES = [root, overview, *(_section_handler(s.slug) for s in SECTIONS)]
