"""The error of a setting that every program reads (through the data converter) and cannot use.

The worker, the starter and the codec server catch this one type around `data_converter()`, so a
bad encryption key and a bad payload store both stop a program with one line naming the
variable (exit code 2), never with a traceback.
"""

from __future__ import annotations


class SettingError(ValueError):
    """A setting that cannot be used. The message names the variable and never a secret."""
