"""What a thread that ran MLX work does before it ends.

MLX keeps per-thread stream state (mlx-lm's ``generation_stream`` is a thread-local
stream) whose destructor runs among the thread's C++ thread-local destructors, after
Python has let go of the thread, and takes the GIL. A thread joined just before the
interpreter exits can reach that destructor while the interpreter is finalizing; taking
the GIL then ends the thread with a forced unwind through a ``noexcept`` destructor, and
the process aborts ("terminate called without an active exception", exit status 134).
Finishing the thread's work and destroying its streams while it still holds a Python
thread state leaves that destructor nothing to do.
"""

from __future__ import annotations

import mlx.core as mx


def release_mlx_streams() -> None:
    """Wait for this thread's MLX work and destroy the streams it created; call last."""
    mx.synchronize()
    mx.clear_streams()
