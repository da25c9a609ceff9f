"""PyInstaller runtime hook: stand-ins for packages the binary leaves out that are still imported at start.

- av (PyAV with FFmpeg, about 100 MB): aiortc imports it for audio and video tracks; the appliance's
  peer opens data channels only.
- black: piccolo.conf.apps imports it to format a piccolo_conf.py it rewrites, which the appliance
  never asks for.

Importing them, or any module inside them, works; every name in them is a class that refuses to be
made, so a code path that does need one fails with a message that says so.
"""

import importlib.abc
import importlib.util
import sys

LEFT_OUT = {"av": "PyAV (audio and video)", "black": "black (code formatting)"}


class _Refusing(type):
    def __call__(cls, *args, **kwargs):
        package = cls.__module__.partition(".")[0]
        raise ImportError(f"{cls.__module__}.{cls.__name__}: {LEFT_OUT[package]} is not in the peermr binary")


def _stand_in_attribute(module_name: str):
    made: dict[str, type] = {}

    def __getattr__(name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        if name not in made:
            made[name] = _Refusing(name, (), {"__module__": module_name})
        return made[name]

    return __getattr__


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in LEFT_OUT:
            return importlib.util.spec_from_loader(name, self, is_package=True)  # a package: submodules import too
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__getattr__ = _stand_in_attribute(module.__name__)


sys.meta_path.append(_StandIns())  # last: a real module, were one bundled, would win
