"""The sizes one exercise check draws, for any op, from a seed: which draw is the exercise's
[sizes] kind (registration.py), and the same seed always gives the same sizes.

"elementwise" (the default), random_sizes: eight non-empty sizes and one empty one. The innermost
named dim (the one kernels vectorize over: bias_gelu's n) takes every remainder mod 8 across the
eight, so some rows are not whole float4s or 16-byte vectors; one is narrower than 8, one a few
thousand wide. Around it: leading dims of different ranks where the pattern has "..." (a 3-D and a
1-D tensor among them), a single row, and other named dims up to 300.

"reduction", reduction_sizes: for an op that reduces over its innermost named dim (the row
length n), the lengths where a block or warp reduction goes wrong. With moduli [m0, m1, ...]:
one size per remainder of n modulo m0 (every partial warp, for m0 = 32); for each further
modulus m, lengths that are 0, 1, m/2, m/2 + 1 and m - 1 modulo m (a whole number of blocks, one
value over, half a block...); one huge 1-D row (2^22 + an odd number of values: a multi-pass
reduction takes three passes); many rows (10000-20000) of a few values each; and one empty size.
Rows are few elsewhere, so the whole draw is a few million values.

"tiled", tiled_sizes: for an op whose kernels tile every dim (a GEMM's m, k and n, each cut into
tiles of the moduli's sizes), the lengths where a tile's edge goes wrong, in every dim in turn:
1, a few (2 to m0 - 2), m0 - 1, m0, m0 + 1, a few tiles and a remainder, and ~1000 (many tiles
and a remainder); for each further modulus m, once or twice m less one and plus one. The dims
not in turn take those of the lengths under 200, so a GEMM's size has at most ~4.4e7 products
(1087 x 200 x 200 with the default 32: a float64 check is quick even on a CPU); one size has
every dim a few tiles and a remainder (4 to 8 of them: many blocks both ways); and there is one
empty size per dim (for a GEMM's k, a sum over nothing).

"tiled_aligned", tiled_sizes(aligned=True): the tiled draw for kernels that take only rows of whole
16-byte runs (TMA's strides; a Hopper GEMM routes other operands to another kernel): the dims that
end an input's pattern (a GEMM's k and n) are multiples of 8 (8 16-bit values are 16 bytes), drawn
round the same edges in steps of 8 (8, a few steps, m0 - 8, m0, m0 + 8, ..., m - 8, m + 8); the
others as "tiled" draws them. The offset layout still reaches the other kernel (unaligned bases).
"""
from __future__ import annotations

import math
import os
import random

from ..model.shapes import ELLIPSIS

KINDS = ("elementwise", "reduction", "tiled", "tiled_aligned")
REDUCTION_MODULI = (32, 1024)   # the default of a "reduction" draw: a warp, two blocks of 512
TILED_MODULI = (32,)            # the default of a "tiled" draw: 32 x 32 tiles
DEFAULT_MODULI = {"reduction": REDUCTION_MODULI, "tiled": TILED_MODULI, "tiled_aligned": TILED_MODULI}  # take moduli
ALIGNED_STEP = 8                # "tiled_aligned": an input's rows are whole runs of 8 (16 bytes of 16-bit values)
HUGE_ROW = 1 << 22              # the huge row's length is this plus an odd number below 2^16
MANY_ROWS = (10_000, 20_000)


def new_seed() -> int:
    return int.from_bytes(os.urandom(4), "little") % 1_000_000


def draw(seed: int, spec, kind: str = "elementwise", moduli: tuple[int, ...] = ()) -> list[tuple[int, ...]]:
    """The sizes of an exercise check: the draw `kind` names (KINDS), from `seed`."""
    if kind == "reduction":
        return reduction_sizes(seed, spec, moduli or REDUCTION_MODULI)
    if kind in ("tiled", "tiled_aligned"):
        return tiled_sizes(seed, spec, moduli or TILED_MODULI, aligned=kind == "tiled_aligned")
    if kind != "elementwise":
        raise ValueError(f"sizes kind must be one of {list(KINDS)}; got {kind!r}")
    return random_sizes(seed, spec)


def _inner(spec) -> tuple[tuple[str, ...], str | None]:
    """The op's size-pattern tokens and its innermost named dim (None when every dim is a number)."""
    tokens = spec.size_pattern.tokens
    named = [t for t in tokens if t != ELLIPSIS and not t.isdigit()]
    return tokens, (named[-1] if named else None)


def _assemble(tokens, inner, inner_value: int, leading, other) -> tuple[int, ...]:
    """One size for the pattern: `inner_value` for the inner dim, leading() (a list) for "...",
    other() for each other named dim, numbers as written."""
    size: list[int] = []
    for t in tokens:
        if t == ELLIPSIS:
            size += leading()
        elif t.isdigit():
            size.append(int(t))
        elif t == inner:
            size.append(inner_value)
        else:
            size.append(other())
    return tuple(size)


def _with_empty(sizes: list, candidates: list, rng: random.Random) -> list:
    empty = list(rng.choice(candidates))
    empty[rng.randrange(len(empty))] = 0
    return sizes + [tuple(empty)]


def random_sizes(seed: int, spec) -> list[tuple[int, ...]]:
    rng = random.Random(seed)
    tokens, inner = _inner(spec)
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
        def leading(lead=lead, lo=lo, hi=hi) -> list[int]:
            first = rng.randint(2, 5) if lead == 2 else rng.randint(lo, hi)
            return [first, rng.randint(1, 60)][:lead] if lead == 2 else [rng.randint(lo, hi)] * lead

        sizes.append(_assemble(tokens, inner, inner_value, leading, lambda lo=lo, hi=hi: rng.randint(lo, hi)))
    return _with_empty(sizes, sizes[:1] + sizes[6:], rng)


def reduction_lengths(rng: random.Random, moduli: tuple[int, ...]) -> list[int]:
    """Row lengths: one per remainder modulo moduli[0], then each further modulus's edge
    remainders (0, 1, m/2, m/2 + 1, m - 1) pinned on lengths of the matching remainder modulo
    moduli[0] (each modulus divides the next), or added where none is left to pin."""
    m0 = moduli[0]
    lengths = [m0 * rng.randint(1 if r == 0 else 0, 40) + r for r in range(m0)]
    free = list(range(m0))
    for m in moduli[1:]:
        for edge in sorted({0, 1, m // 2, m // 2 + 1, m - 1}):
            value = m * rng.randint(1 if edge == 0 else 0, 4) + edge
            match = [i for i in free if lengths[i] % m0 == edge % m0]
            if match:
                i = rng.choice(match)
                lengths[i] = value
                free.remove(i)
            else:
                lengths.append(value)
    return lengths


def reduction_sizes(seed: int, spec, moduli: tuple[int, ...] = REDUCTION_MODULI) -> list[tuple[int, ...]]:
    rng = random.Random(seed)
    tokens, inner = _inner(spec)
    lengths = reduction_lengths(rng, tuple(moduli))
    rng.shuffle(lengths)
    # The rows of each length, in turn: 1-D, a few rows, 3-D, a single row (sizes stay small).
    def rows(kind: int) -> list[int]:
        return [[], [rng.randint(2, 48)], [rng.randint(2, 3), rng.randint(1, 12)], [1]][kind]

    plans = [(rows(i % 4), n) for i, n in enumerate(lengths)]
    plans.append(([], HUGE_ROW + 2 * rng.randrange(1 << 15) + 1))              # one huge row, odd
    plans.append(([rng.randint(*MANY_ROWS)], rng.randint(1, 2 * moduli[0])))  # many short rows
    sizes = []
    for lead, n in plans:
        # Without "...", the rows go to the other named dims: all of them to the first, 1 to the rest.
        other = iter([math.prod(lead)] + [1] * len(tokens))
        sizes.append(_assemble(tokens, inner, n, lambda lead=lead: lead, lambda other=other: next(other)))
    return _with_empty(sizes, [s for s in sizes[:len(lengths)] if len(s) >= 2] or sizes[:len(lengths)], rng)


def tiled_lengths(rng: random.Random, moduli: tuple[int, ...], step: int = 1) -> tuple[list[int], int]:
    """(the short lengths, the long one) a tiled draw gives each dim in turn (module docstring), in
    multiples of `step`."""
    m0 = moduli[0]
    if m0 % step or m0 <= step:
        raise ValueError(f"moduli: the first tile ({m0}) must be a multiple of {step} above it for this draw")
    short = [step, step * rng.randint(2, max(2, m0 // step - 2)), m0 - step, m0, m0 + step,
             m0 * rng.randint(2, 5) + step * rng.randint(1, m0 // step - 1)]
    for m in moduli[1:]:
        short += [m * rng.randint(1, 2) - step, m * rng.randint(1, 2) + step]
    return short, m0 * (1000 // m0 + rng.randint(-3, 3)) + step * rng.randint(1, m0 // step - 1)


def tiled_sizes(seed: int, spec, moduli: tuple[int, ...] = TILED_MODULI, aligned: bool = False
                ) -> list[tuple[int, ...]]:
    rng = random.Random(seed)
    tokens = spec.size_pattern.tokens
    dims = [i for i, t in enumerate(tokens) if not t.isdigit()]   # "..." stands for one dim here
    plain = tiled_lengths(rng, tuple(moduli))
    rows = {t.pattern.tokens[-1] for t in spec.inputs} if aligned else set()   # the dims ending an input
    step = {d: ALIGNED_STEP if tokens[d] in rows else 1 for d in dims}
    whole = tiled_lengths(rng, tuple(moduli), ALIGNED_STEP) if rows else plain
    lengths = {d: whole if step[d] > 1 else plain for d in dims}
    few = {d: [n for n in short if n <= 200] or short[:1] for d, (short, _) in lengths.items()}

    def size(chosen: dict[int, int]) -> tuple[int, ...]:
        return tuple(int(t) if t.isdigit() else chosen[i] if i in chosen else rng.choice(few[i])
                     for i, t in enumerate(tokens))

    m0 = moduli[0]
    sizes = [size({d: n}) for d in dims for n in [*lengths[d][0], lengths[d][1]]]
    sizes.append(size({d: m0 * rng.randint(4, 8) + step[d] * rng.randint(1, m0 // step[d] - 1) for d in dims}))
    rng.shuffle(sizes)
    return sizes + [size({d: 0}) for d in dims]
