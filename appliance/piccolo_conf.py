"""Piccolo's configuration module: the engine and the per-domain apps."""

from piccolo.conf.apps import AppRegistry

from appliance.db import APPS, current_engine

APP_REGISTRY = AppRegistry(apps=APPS)
DB = current_engine()
