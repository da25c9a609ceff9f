"""Piccolo's configuration module: the engine and the per-domain apps."""

from piccolo.conf.apps import AppRegistry

from appliance.db import APPS, current_engine

APP_REGISTRY = AppRegistry(apps=APPS)


def __getattr__(name: str):
    # DB is looked up on every use (PEP 562), so Piccolo's migrations always run
    # against the engine db.configure() made for the current settings.
    if name == "DB":
        return current_engine()
    raise AttributeError(name)
