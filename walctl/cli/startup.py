"""The garbage collector around a walctl process's start and end (only ``walctl.cli.main``, the
process's entry point, uses this; tests that run the app in-process never pause anything).

A short command's imports make ~30,000 objects that live until the process ends: the collector
traversed them in ~40 collections while they were made (~10 ms), again in every full collection of
the command, and again several times as the interpreter shut down (~40 ms after the last line was
printed: more than a tiny command's whole run of its own). So:

- ``pause_collection``: no collection while the modules are imported and the command line is parsed
  (a few hundred objects of import-time cycles wait until the command starts);
- ``command_starts`` (the root callback, right before the command's body): collection resumes, and
  what exists by then is frozen (``gc.freeze``: moved to the permanent generation, never traversed
  again: module-level objects that live until exit anyway);
- at exit, after the other exit handlers, what is left is frozen too, so the interpreter's final
  collections skip it. Python does not promise ``__del__`` for objects alive at exit; walctl closes,
  flushes and syncs what it writes itself, before its command returns.
"""

from __future__ import annotations

import gc

_paused = False
_exit_hook = False


def pause_collection() -> None:
    """Stop collecting until the command starts (or the run ends without one)."""
    global _paused, _exit_hook
    if not _exit_hook:
        import atexit

        atexit.register(gc.freeze)  # registered before the command's own handlers: runs after them
        _exit_hook = True
    if gc.isenabled():
        gc.disable()
        _paused = True


def command_starts() -> None:
    """Right before a command's body: collect again, and never traverse the start-up's objects."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()


def resume_collection() -> None:
    """The run ended (help, a usage error, or the command's end): collection as before the pause."""
    global _paused
    if _paused:
        _paused = False
        gc.enable()
