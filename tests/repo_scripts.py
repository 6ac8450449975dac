"""The repository's scripts that tests read as modules (lessons/editions.py, docs/glossary.py): each loaded once,
by path, and registered under its name (they are scripts beside the files they serve, not a package)."""

import importlib.util
import sys


def load(name, path):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
