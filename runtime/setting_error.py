"""The error of a setting a program cannot use.

Every program checks its settings at start and catches this one type: the typed settings
(`runtime.settings.Settings`: a switch that is not true or false, a mode that is not one of its
words, a number that is not positive, a URL without its scheme), the encryption key and the
payload store (through `data_converter()`), the metrics address and the worker's process count.
Each stops the program with one line naming the variable and what it accepts (exit code 2), never
with a traceback.
"""

from __future__ import annotations


class SettingError(ValueError):
    """A setting that cannot be used. The message names the variable and never a secret."""
