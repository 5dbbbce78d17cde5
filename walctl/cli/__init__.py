"""The walctl CLI: the app and its command registration (app.py), the CLI conventions
(conventions.py), the one error -> exit boundary (boundary.py) and the error output (render.py).

Nothing imports this package but the entry points (``walctl = "walctl.cli:main"``,
``python -m walctl``) and tests: commands take what they share from walctl.commands._shared.
"""

from walctl.cli.app import app, main, register
from walctl.cli.boundary import Interrupted, WalctlGroup, boundary, interrupted_error, usage_line
from walctl.cli.conventions import apply_conventions, env_name, normalise_args

__all__ = ["Interrupted", "WalctlGroup", "app", "apply_conventions", "boundary", "env_name", "interrupted_error",
           "main", "normalise_args", "register", "usage_line"]
