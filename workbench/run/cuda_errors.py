"""A CUDA error met while running someone's code, or a runner process it ended: its likely cause,
and whether this process's CUDA context survived. An unchecked launch error stays pending until the
next op raises (and clears) it; a fault inside a kernel is sticky: only a fresh process has a usable
GPU again."""
from __future__ import annotations

import ctypes
import signal

# (words of the CUDA error's text, what most likely caused it), first match wins
_CAUSES = (
    ("invalid configuration argument", "a launch with an impossible grid or block: zero blocks (an empty tensor: "
     "return before launching when there is nothing to do), more than 1024 threads per block, or a grid computed "
     "from an int size that overflowed past 2^31"),
    ("invalid argument", "a launch or runtime call given an impossible value: most often a grid of zero blocks (an "
     "empty tensor) or one computed from an int size past 2^31"),
    ("illegal memory access", "a read or write outside the tensors: an index past the end, an int index that "
     "overflowed past 2^31, or a view (strided, offset, transposed) read as if it were contiguous"),
    ("misaligned address", "a vector access (float4: 16 bytes) through a pointer that is not 16-byte aligned, such "
     "as a view that starts one element into its storage"),
    ("device-side assert", "an assert in device code failed"),
    ("unspecified launch failure", "the kernel faulted (most often an out-of-bounds access)"),
    ("no kernel image", "the library holds no code for this GPU's architecture"),
    ("too many resources requested", "the kernel needs more registers or shared memory per block than the GPU "
     "has: launch fewer threads per block"),
    ("out of memory", "the GPU's memory ran out"),
    ("illegal instruction", "the kernel ran an instruction this GPU does not have, or jumped to bad code"),
)

# What a runner killed by a signal was most likely doing (the case's code ended it; correctness.py
# fails the case it was in, judge/remote.py says which signal).
SIGNAL_CAUSES = {
    "SIGFPE": "an integer division by zero in host code (such as numel() / size(-1) for a tensor whose last "
              "dimension is 0)",
    "SIGSEGV": "an invalid memory access in host code (a pointer past a tensor's data, or a device pointer read on "
               "the host)",
    "SIGBUS": "an invalid memory access in host code",
    "SIGABRT": "an abort: an uncaught C++ exception or a failed assert",
    "SIGILL": "an illegal instruction in host code",
    "SIGKILL": "killed from outside (out of memory, or a time limit)",
}


def likely_cause(e: BaseException | str) -> str:
    """What most likely caused a CUDA error (an exception or its text) or a runner's death by a
    signal (an IsolatedRunError's returncode); "" where nothing is known."""
    import torch

    code = getattr(e, "returncode", None)
    if isinstance(code, int) and code < 0:
        try:
            return SIGNAL_CAUSES.get(signal.Signals(-code).name, "")
        except ValueError:
            return ""
    text = str(e)
    if not isinstance(e, getattr(torch, "AcceleratorError", ())) and "CUDA error" not in text:
        return ""
    low = text.lower()
    return next((cause for words, cause in _CAUSES if words in low), "")


def explained(e: BaseException | str) -> str:
    """The error's first line, with its likely cause where one is known and not said already."""
    text = str(e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    cause = "" if "likely cause:" in line else likely_cause(e)
    return f"{line} (likely cause: {cause})" if cause else line


def error_name(e: BaseException) -> str:
    """What raised, by its type's name (a runner's refusal: the type the runner named)."""
    return getattr(e, "error_name", type(e).__name__)


def context_state(device) -> tuple[str, str]:
    """("ok", ""), ("cleared", the error that was pending and is now cleared) or ("lost", the error
    every call now meets) for the CUDA context of `device`, launching nothing where the runtime's
    last error can be read (a profiler in front sees no kernel of this): a pending launch error is
    what cudaGetLastError returns, a sticky one what synchronizing raises."""
    import torch

    seen = []
    for _ in range(2):
        try:
            torch.cuda.synchronize(device)
            pending = _take_last_error()
            if pending is None:  # no runtime found here: torch's next launch raises what is pending
                t = torch.ones(1, device=device)
                (t + t).item()
            elif pending:
                seen.append(pending)
            return ("cleared", seen[0]) if seen else ("ok", "")
        except Exception as e:  # noqa: BLE001 - whatever it raised is what is reported
            text = str(e).strip()
            seen.append(text.splitlines()[0] if text else type(e).__name__)
    return "lost", seen[-1]


_runtime = None


def _take_last_error() -> str | None:
    """The launch error pending on this thread ("CUDA error: ..."), cleared; "" where none; None
    where this process has no CUDA runtime loaded (libcudart: torch's, which an extension's
    launches share)."""
    global _runtime
    if _runtime is None:
        with open("/proc/self/maps") as maps:
            path = next((ln.split()[-1] for ln in maps if "/libcudart.so" in ln), None)
        if path is None:
            return None
        _runtime = ctypes.CDLL(path)
        _runtime.cudaGetErrorString.restype = ctypes.c_char_p
    code = _runtime.cudaGetLastError()
    return f"CUDA error: {_runtime.cudaGetErrorString(code).decode()}" if code else ""
