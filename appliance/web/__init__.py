"""The dashboard: pages and htmx fragments that call into the domains, plus operational endpoints."""
