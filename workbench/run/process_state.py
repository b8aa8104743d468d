"""What this process has loaded, in one place: the harness, the ops declared to it, their
bindings, each variant name's newest build (and last good one), and the descriptions of builds not
from their tree file. The loader writes here alone; wb.variants reads the registry with these over it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..model import registry


@dataclass
class LoadedState:
    lock: threading.RLock = field(default_factory=threading.RLock)
    harness: dict | None = None      # the harness's info (library, key, built, cuda, ...), once loaded
    harness_lib: object = None       # ctypes handle on the harness: the control plane (declare, register)
    declared: set = field(default_factory=set)       # ops declared to the harness
    bindings: dict = field(default_factory=dict)     # op -> (content key, contract) of the binding registered now
    current: dict = field(default_factory=dict)      # (op, name) -> the newest loaded build (a Kernel)
    last_good: dict = field(default_factory=dict)    # (op, name) -> a description of that build, for BuildErrors
    described: dict = field(default_factory=dict)    # (op, name) -> VariantInfo of a build not from its tree file

    def newest(self, op: str, name: str):
        return self.current.get((op, name))

    def put(self, kernel, where: str, from_tree: bool, info: registry.VariantInfo | None = None) -> None:
        """Record a loaded build as its name's newest (`where`: for a later BuildError); one not from
        its tree file is described by `info` from now on."""
        with self.lock:
            key = (kernel.op, kernel.name)
            self.current[key] = kernel
            self.last_good[key] = f"{kernel.op}/{kernel.qualified} ({where})"
            if from_tree:
                self.described.pop(key, None)
            else:
                self.described[key] = info

    def loaded(self, op: str) -> list:
        return [k for (o, _), k in sorted(self.current.items()) if o == op]


STATE = LoadedState()


def variants(op: str) -> list[registry.VariantInfo]:
    """wb.variants: the op's folder's variants (what this process built under a name over the file's
    declaration), then the names built only here."""
    out = [STATE.described.get((op, v.name)) or v for v in registry.variants(op)]
    known = {v.name for v in out}
    out += [info for (o, name), info in sorted(STATE.described.items()) if o == op and name not in known]
    return out
