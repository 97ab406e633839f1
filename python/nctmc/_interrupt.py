"""Ctrl-C during a long C call (sampling, infilling, evaluation).

Python runs its SIGINT handler only between bytecodes of the main thread,
so a C call that never calls back ignores Ctrl-C until it returns; and
when it does call back, the KeyboardInterrupt is raised at the entry of the
ctypes callback, where ctypes can only print "Exception ignored on calling
ctypes callback" and return 0 (which the library reads as "stop", so the
user saw nctmc.Cancelled).

`Interruptible` fixes both. For the duration of the call (on the main
thread, where Python's default SIGINT handler is installed) it replaces
that handler by one that only records the signal; every call is made with
a progress callback (the binding's own when the user gave none), which
returns 0 — the library's cancel — as soon as a signal was recorded; and
when the call has returned, the original handler is put back and the
signal delivered to it: KeyboardInterrupt, raised from the binding's call.
A call on another thread, or under a handler the program installed
itself, is left as it is (the program's handler then runs as usual).
"""
import signal
import threading


class Interruptible:
    """with Interruptible() as stop: ... make the C call, whose callbacks
    return 0 when stop() is true ... ; a Ctrl-C received during the block
    is raised as KeyboardInterrupt when it ends."""

    def __init__(self):
        self._received = False
        self._previous = None

    def __call__(self):
        """True once a Ctrl-C arrived: the callback must return 0."""
        return self._received

    def _record(self, signum, frame):
        self._received = True

    def __enter__(self):
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._record)
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        if self._received:
            raise KeyboardInterrupt from None
        return False
