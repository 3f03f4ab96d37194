"""The one exception every model-loading failure becomes.

The CLI and server show its message to the user as is, so each message names the file or
field at fault and what would fix it, instead of a traceback from deep inside a library.
"""

from __future__ import annotations


class ModelLoadError(Exception):
    """A model could not be found, converted, validated or loaded."""
