"""The sizes one exercise check draws, for any op, from a seed.

Eight non-empty sizes and one empty one. The innermost named dim (the one kernels vectorize over:
bias_gelu's n) takes every remainder mod 8 across the eight, so some rows are not whole float4s or
16-byte vectors; one is narrower than 8, one a few thousand wide. Around it: leading dims of
different ranks where the pattern has "..." (a 3-D and a 1-D tensor among them), a single row, and
other named dims up to 300.
"""
from __future__ import annotations

import os
import random

from ..shapes import ELLIPSIS


def new_seed() -> int:
    return int.from_bytes(os.urandom(4), "little") % 1_000_000


def random_sizes(seed: int, spec) -> list[tuple[int, ...]]:
    rng = random.Random(seed)
    tokens = spec.size_pattern.tokens
    named = [t for t in tokens if t != ELLIPSIS and not t.isdigit()]
    inner = named[-1] if named else None
    narrow = rng.randrange(1, 8)
    residues = [r for r in range(8) if r != narrow]
    rng.shuffle(residues)

    def cols(residue: int, lo: int, hi: int) -> int:
        return 8 * rng.randint(lo, hi) + residue

    # (leading-dim count, inner value, range of the other dims) per case
    plans = [
        (1, cols(residues[0], 1, 130), (2, 300)),
        (1, narrow, (2, 300)),                          # fewer columns than one vector
        (2, cols(residues[1], 1, 40), (1, 60)),         # 3-D
        (1, cols(residues[2], 250, 600), (2, 40)),      # 2000-4800 columns
        (1, cols(residues[3], 1, 130), (1, 1)),         # a single row
        (0, cols(residues[4], 1, 200), (1, 300)),       # 1-D (or, with no "...", other dims drawn)
        (1, cols(residues[5], 1, 130), (2, 300)),
        (1, cols(residues[6], 1, 130), (2, 300)),
    ]
    sizes = []
    for lead, inner_value, (lo, hi) in plans:
        size: list[int] = []
        for t in tokens:
            if t == ELLIPSIS:
                first = rng.randint(2, 5) if lead == 2 else rng.randint(lo, hi)
                size += [first, rng.randint(1, 60)][:lead] if lead == 2 else [rng.randint(lo, hi)] * lead
            elif t.isdigit():
                size.append(int(t))
            elif t == inner:
                size.append(inner_value)
            else:
                size.append(rng.randint(lo, hi))
        sizes.append(tuple(size))
    empty = list(rng.choice(sizes[:1] + sizes[6:]))
    empty[rng.randrange(len(empty))] = 0
    sizes.append(tuple(empty))
    return sizes
