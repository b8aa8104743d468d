"""A profile's tables: each kernel's figures and verdict (text, and HTML in a notebook), its hot
source lines, and the deltas between variants profiled side by side."""
from __future__ import annotations

import html
import math
import pathlib
from dataclasses import dataclass, field

from .. import roofline as roofline_
from .metrics import top_stalls
from .rules import Verdict


@dataclass
class KernelProfile:
    variant: str
    name: str                      # short kernel name
    metrics: dict                  # kernel_metrics()
    raw: dict                      # ncu's row, every column
    nbytes: float | None = None    # this kernel's share of the op's declared bytes and FLOPs
    flops: float | None = None
    verdict: Verdict | None = None
    lines: list = field(default_factory=list)  # its source lines with the most stall samples (hot_lines)

    @property
    def seconds(self) -> float | None:
        d = self.metrics.get("duration_ns")
        return d * 1e-9 if d else None


HOT_LINES = 3  # source lines shown per kernel


def hot_lines(lines: list[dict], n: int = HOT_LINES) -> list[dict]:
    """The n source lines (ncu.parse_source_csv) with the most warp-stall samples, each with its
    share of the kernel's samples and its top stall reasons; a line listed under several files or
    blocks is counted once."""
    merged: dict[tuple, dict] = {}
    for ln in lines:
        key = (ln["file"], ln["line"])
        m = merged.setdefault(key, dict(ln, samples=0.0, stalls={}))
        m["samples"] += ln["samples"]
        for r, v in ln["stalls"].items():
            m["stalls"][r] = m["stalls"].get(r, 0.0) + v
    total = sum(m["samples"] for m in merged.values()) or 1.0
    top = sorted(merged.values(), key=lambda m: -m["samples"])[:n]
    for m in top:
        m["share"] = 100 * m["samples"] / total
        m["top"] = sorted(m["stalls"].items(), key=lambda kv: -kv[1])[:2]
    return top


def _line_text(ln: dict) -> str:
    where = f"{pathlib.Path(ln['file']).name}:{ln['line']}"
    why = ", ".join(f"{r} {100 * v / ln['samples']:.0f}%" for r, v in ln["top"])
    return f"{where}  {ln['share']:.0f}% of the stall samples ({why})  {ln['text']}"


def _fmt(v, spec: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v, spec) if not isinstance(v, str) else v


def _ratio(vals: list, f: str) -> str:
    """The ratio column's cell: the second variant's value over the first's."""
    a, b = vals
    return f"{b / a:.2f}x" if f != "s" and isinstance(a, (int, float)) and isinstance(b, (int, float)) and a else ""


@dataclass
class Profile:
    """wb.profile's result: per kernel its metrics and verdict; table() for a shell, the HTML table
    in a notebook; compare() (two or more variants); rows() and roofline()."""
    op: str
    shape: tuple
    dtype: str
    direction: str
    variants: list[str]
    kernels: list[KernelProfile]
    nbytes: float | None = None          # the op's declared bytes and FLOPs for this call
    flops: float | None = None
    copy_GBps: float | None = None
    gemm_TFLOPs: float | None = None
    compute_bound: bool = False
    notes: list[str] = field(default_factory=list)
    # per variant, the check of the profiled call's output at this shape (ncu.Kernels.measured:
    # verified "ok" / "wrong" / "not checked", verify_detail, ...); a variant missing: not checked
    checks: dict = field(default_factory=dict)

    def checked(self, variant: str) -> str:
        """"ok", "wrong" or "not checked": the profiled call's output at this shape."""
        return (self.checks.get(variant) or {}).get("verified") or "not checked"

    def wrong(self) -> list[str]:
        return [v for v in self.variants if self.checked(v) == "wrong"]

    def _wrong_lines(self) -> list[str]:
        return [f"WRONG OUTPUT: {v} at {'x'.join(map(str, self.shape))} {self.dtype} {self.direction}: "
                f"{self.checks[v].get('verify_detail') or 'its output differs from the trusted result'}. Its counters "
                f"describe a call that computed the wrong thing: no performance verdict" for v in self.wrong()]

    def of(self, variant: str) -> list[KernelProfile]:
        """The kernels of one variant, in launch order."""
        return [k for k in self.kernels if k.variant == variant]

    def verdict(self, variant: str | None = None) -> Verdict:
        """The verdict of the variant's longest kernel (the first variant's by default)."""
        ks = self.of(variant or self.variants[0])
        return max(ks, key=lambda k: k.metrics.get("duration_ns") or 0).verdict

    def totals(self, variant: str) -> dict:
        """The variant's call: durations, requests, sectors and bytes summed over its kernels;
        percentages weighted by duration; the call's GB/s and TFLOP/s for the declared work."""
        ks = self.of(variant)
        ms = [k.metrics for k in ks]
        dur = sum(m.get("duration_ns") or 0 for m in ms)
        out = {"kernels": len(ks), "duration_ns": dur or None}
        for key in ("ld_requests", "st_requests", "ld_sectors", "st_sectors", "dram_bytes", "spill_bytes"):
            vals = [m.get(key) for m in ms if m.get(key) is not None]
            out[key] = sum(vals) if vals else None
        for key in ("dram_pct", "occupancy", "sm_pct", "tensor_pipe", "issue_pct", "l2_hit", "ld_efficiency",
                    "st_efficiency", "cycles_per_issue"):  # efficiencies weighted by requests, the rest by time
            weight = {"ld_efficiency": "ld_requests", "st_efficiency": "st_requests"}.get(key, "duration_ns")
            pairs = [(m[key], m.get(weight) or 0) for m in ms if m.get(key) is not None]
            w = sum(d for _, d in pairs)
            out[key] = sum(v * d for v, d in pairs) / w if w else (pairs[0][0] if pairs else None)
        for op in ("ld", "st"):
            s, r = out[f"{op}_sectors"], out[f"{op}_requests"]
            out[f"{op}_bytes_per_request"] = 32 * s / r if s is not None and r else None
        out["registers"] = max((m["registers"] for m in ms if m.get("registers") is not None), default=None)
        stalls: dict[str, float] = {}
        for m in ms:
            for r, v in (m.get("stalls") or {}).items():
                stalls[r] = stalls.get(r, 0.0) + v * (m.get("duration_ns") or 0) / (dur or 1)
        out["stalls"] = stalls
        sec = dur * 1e-9
        out["GBps"] = self.nbytes / sec / 1e9 if self.nbytes and sec else None
        out["TFLOPs"] = self.flops / sec / 1e12 if self.flops and sec else None
        return out

    def compare(self) -> list[str]:
        """For each variant after the first: how its call differs from the first's (deltas())."""
        if len(self.variants) < 2:
            return []
        base = self.variants[0]
        a, out = self.totals(base), []
        for v in self.variants[1:]:
            bad = [x for x in (base, v) if self.checked(x) == "wrong"]
            if bad:  # no speed comparison with a call that computed the wrong thing
                out.append(f"{base} -> {v}: not compared ({' and '.join(bad)} computed the wrong output)")
                continue
            parts = deltas(a, self.totals(v))
            if self.verdict(base).kind != self.verdict(v).kind:
                parts.append(f"verdict {self.verdict(base).kind} -> {self.verdict(v).kind}")
            out.append(f"{base} -> {v}: " + "; ".join(parts))
        return out

    # -- the table
    def _rows(self) -> list[tuple[str, list, str]]:
        """(label, one value per kernel, format) for every row of the table."""
        ks = self.kernels

        def col(fn):
            return [fn(k) for k in ks]

        def rate(work: str, unit: float, ceiling: float = 0.0):  # the kernel's declared work per second
            def one(k):
                v = getattr(k, work) / k.seconds / unit if getattr(k, work) and k.seconds else None
                return (100 * v / ceiling if ceiling else v) if v else None
            return col(one)

        rows = [("output at this shape", col(lambda k: {"ok": "ok", "wrong": "WRONG"}.get(self.checked(k.variant),
                                                                                          "not checked")), "s"),
                ("duration (us)", col(lambda k: (k.metrics.get("duration_ns") or 0) / 1e3 or None), ".1f")]
        if self.nbytes:
            rows.append(("GB/s (declared bytes)", rate("nbytes", 1e9), ".0f"))
            if self.copy_GBps:
                rows.append(("% of copy ceiling", rate("nbytes", 1e9, self.copy_GBps), ".0f"))
        if self.flops and (self.compute_bound or self.gemm_TFLOPs):
            rows.append(("TFLOP/s (declared FLOPs)", rate("flops", 1e12), ".2f"))
            if self.gemm_TFLOPs:
                rows.append(("% of GEMM ceiling", rate("flops", 1e12, self.gemm_TFLOPs), ".0f"))
        g = lambda key: col(lambda k: k.metrics.get(key))  # noqa: E731
        rows += [
            ("DRAM throughput (% of peak)", g("dram_pct"), ".0f"),
            ("DRAM read + write (MB)", col(lambda k: (k.metrics.get("dram_bytes") or 0) / 1e6
                                           if k.metrics.get("dram_bytes") is not None else None), ".1f"),
            ("L2 hit rate (%)", g("l2_hit"), ".0f"),
            ("global load requests", g("ld_requests"), ",.0f"),
            ("bytes per load request", g("ld_bytes_per_request"), ".0f"),
            ("load sector efficiency (%)", g("ld_efficiency"), ".0f"),
            ("global store requests", g("st_requests"), ",.0f"),
            ("bytes per store request", g("st_bytes_per_request"), ".0f"),
            ("store sector efficiency (%)", g("st_efficiency"), ".0f"),
            ("occupancy achieved (%)", g("occupancy"), ".0f"),
            ("occupancy possible (%)", g("occupancy_theoretical"), ".0f"),
            ("occupancy limited by", col(lambda k: k.metrics.get("limiter") or "-"), "s"),
            ("SM throughput (% of peak)", g("sm_pct"), ".0f"),
            ("tensor pipe (% of peak)", g("tensor_pipe"), ".0f"),
            ("issue slots busy (%)", g("issue_pct"), ".0f"),
            ("cycles per issued instruction", g("cycles_per_issue"), ".1f"),
            ("top stalls (warps per instr.)", col(lambda k: ", ".join(f"{r} {v:.1f}" for r, v in top_stalls(k.metrics)) or "-"), "s"),
            ("registers per thread", g("registers"), ".0f"),
            ("shared memory per block (B)", col(lambda k: None if k.metrics.get("smem_static") is None
                                                and k.metrics.get("smem_dynamic") is None else
                                                (k.metrics.get("smem_static") or 0) + (k.metrics.get("smem_dynamic") or 0)), ".0f"),
            ("spilled / local bytes", g("spill_bytes"), ",.0f"),
            ("grid x block", col(lambda k: f"{_fmt(k.metrics.get('grid_size'), '.0f')} x "
                                           f"{_fmt(k.metrics.get('block_size'), '.0f')}"), "s"),
        ]
        return rows

    def _grid(self) -> tuple[list[tuple[str, str]], list[tuple[str, list[str]]]]:
        """The table's column heads (variant, kernel) and its rows (label, cells), with a ratio
        column (the second over the first) for two variants of one kernel each."""
        rows = self._rows()
        heads = [(k.variant, k.name) for k in self.kernels]
        grid = [(label, [_fmt(x, f) for x in vals]) for label, vals, f in rows]
        if len(self.variants) == 2 and all(len(self.of(v)) == 1 for v in self.variants):
            heads.append((f"{self.variants[1]}/{self.variants[0]}", "ratio"))
            for (_, cells), (_, vals, f) in zip(grid, rows):
                cells.append(_ratio(vals, f))
        return heads, grid

    def header(self) -> str:
        ceil = []
        if self.copy_GBps:
            ceil.append(f"copy ceiling {self.copy_GBps:.0f} GB/s")
        if self.gemm_TFLOPs:
            ceil.append(f"GEMM ceiling {self.gemm_TFLOPs:.1f} TFLOP/s (cuBLAS, {self.dtype})")
        work = []
        if self.nbytes:
            work.append(f"declared {self.nbytes / 1e6:.1f} MB")
        if self.flops:
            work.append(f"{self.flops / 1e9:.2f} GFLOP")
        return (f"profile: {self.op} {self.direction} {self.dtype} {'x'.join(map(str, self.shape))}, one call "
                f"(Nsight Compute)" + (f"; {', '.join(work)}" if work else "") + (f"; {', '.join(ceil)}" if ceil else ""))

    def table(self) -> str:
        """The metrics (rows) of every kernel (columns), then a verdict per kernel, its hot source
        lines, the comparison and the notes."""
        heads, grid = self._grid()
        lw = max(len(label) for label, _ in grid)
        widths = [max(len(h[0]), len(h[1]), *(len(c[i]) for _, c in grid)) for i, h in enumerate(heads)]
        lines = [self.header(), *self._wrong_lines(), ""]
        lines.append(" " * lw + "  " + "  ".join(h[0].rjust(w) for h, w in zip(heads, widths)))
        lines.append(" " * lw + "  " + "  ".join(h[1].rjust(w) for h, w in zip(heads, widths)))
        lines.append("-" * len(lines[-1]))
        for label, cells in grid:
            lines.append(label.ljust(lw) + "  " + "  ".join(x.rjust(w) for x, w in zip(cells, widths)))
        lines.append("")
        lines += [f"verdict {k.variant}/{k.name}: {k.verdict.line}" for k in self.kernels if k.verdict]
        for k in self.kernels:
            if k.lines:
                lines.append(f"hot source lines {k.variant}/{k.name}:")
                lines += [f"  {_line_text(ln)}" for ln in k.lines]
        lines += self.compare()
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.table()

    def _repr_html_(self) -> str:
        e = html.escape
        heads, grid = self._grid()
        head = "".join(f"<th>{e(v)}<br><code>{e(n)}</code></th>" for v, n in heads)
        body = "".join(f"<tr><th style='text-align:left'>{e(label)}</th>"
                       + "".join(f"<td style='text-align:right'>{e(c)}</td>" for c in cells) + "</tr>"
                       for label, cells in grid)
        verdicts = "".join(f"<li><b>{e(k.variant)}/{e(k.name)}</b>: {e(k.verdict.summary)}. <i>Try:</i> "
                           f"{e(k.verdict.advice)}</li>" for k in self.kernels if k.verdict)
        hot = "".join(f"<p><b>hot source lines {e(k.variant)}/{e(k.name)}</b>:<br>"
                      + "<br>".join(f"<code>{e(_line_text(ln))}</code>" for ln in k.lines) + "</p>"
                      for k in self.kernels if k.lines)
        extra = hot + "".join(f"<p>{e(c)}</p>" for c in self.compare()) + "".join(f"<p><i>note: {e(n)}</i></p>" for n in self.notes)
        wrong = "".join(f"<p style='color:#b00020'><b>{e(w)}</b></p>" for w in self._wrong_lines())
        return (f"<p>{e(self.header())}</p>{wrong}<table><thead><tr><th></th>{head}</tr></thead><tbody>{body}"
                f"</tbody></table><ul>{verdicts}</ul>{extra}")

    # -- the roofline
    def rows(self) -> list[dict]:
        """One benchmark-like row per variant (its call's duration under the profiler), for
        roofline.figure / roofline.points."""
        out = []
        for v in self.variants:
            t = self.totals(v)
            ms = (t["duration_ns"] or 0) / 1e6
            r = dict(kind="variant", op=self.op, variant=v, dtype=self.dtype, shape="x".join(map(str, self.shape)),
                     direction=self.direction, median_ms=ms or math.nan, bytes=self.nbytes or 0, flops=self.flops or 0,
                     GBps=t["GBps"] or math.nan, TFLOPs=t["TFLOPs"] or math.nan,
                     ceiling_GBps=self.copy_GBps if self.copy_GBps else math.nan, source="ncu",
                     verified=self.checked(v))
            if self.gemm_TFLOPs:
                r["matmul_ceiling_TFLOPs"] = self.gemm_TFLOPs
            out.append(r)
        return out

    def roofline(self, path=None):
        """The profiled variants on the roofline (a Figure; also a PNG at `path`)."""
        return roofline_.figure(self.rows(), path, direction=self.direction, every=True)


def _change(a, b, *, rel: float = 0.1) -> bool:
    """a and b differ by more than `rel` (as a ratio; any difference where one is 0)."""
    if a is None or b is None:
        return False
    if a <= 0 or b <= 0:
        return a != b
    return abs(math.log(b / a)) > math.log1p(rel)


def deltas(a: dict, b: dict) -> list[str]:
    """What changed from call a to call b (Profile.totals of each), in the order that explains a
    speedup: time, then the memory instructions, the bytes, occupancy and issue, the stalls."""
    out = []
    da, db = a.get("duration_ns"), b.get("duration_ns")
    if da and db:
        speed = f"{da / db:.2f}x faster" if db <= da else f"{db / da:.2f}x slower"
        out.append(f"{speed} ({da / 1e3:.1f} -> {db / 1e3:.1f} us)")
    ra = (a.get("ld_requests") or 0) + (a.get("st_requests") or 0)
    rb = (b.get("ld_requests") or 0) + (b.get("st_requests") or 0)
    if ra and rb and _change(ra, rb):
        out.append(f"global memory requests {ra / rb:.2f}x fewer" if rb < ra else f"global memory requests {rb / ra:.2f}x more")
    for key, what in (("ld_bytes_per_request", "bytes per load request"), ("st_bytes_per_request", "bytes per store request")):
        if _change(a.get(key), b.get(key)):
            out.append(f"{what} {a[key]:.0f} -> {b[key]:.0f}")
    for key, what in (("ld_efficiency", "load sector efficiency"), ("st_efficiency", "store sector efficiency"),
                      ("dram_pct", "DRAM throughput"), ("occupancy", "occupancy"), ("issue_pct", "issue slots busy"),
                      ("sm_pct", "SM throughput"), ("tensor_pipe", "tensor pipe"), ("l2_hit", "L2 hit rate")):
        x, y = a.get(key), b.get(key)
        if x is not None and y is not None and abs(y - x) >= 5:
            out.append(f"{what} {x:.0f}% -> {y:.0f}%")
    if _change(a.get("dram_bytes"), b.get("dram_bytes")):
        out.append(f"DRAM traffic {a['dram_bytes'] / 1e6:.1f} -> {b['dram_bytes'] / 1e6:.1f} MB")
    if _change(a.get("cycles_per_issue"), b.get("cycles_per_issue")):
        out.append(f"cycles per issued instruction {a['cycles_per_issue']:.1f} -> {b['cycles_per_issue']:.1f}")
    sa, sb = top_stalls(a, 1), top_stalls(b, 1)
    if sa and sb and (sa[0][0] != sb[0][0] or _change(sa[0][1], sb[0][1], rel=0.25)):
        out.append(f"top stall {sa[0][0]} {sa[0][1]:.1f} -> {sb[0][0]} {sb[0][1]:.1f}")
    if a.get("registers") is not None and b.get("registers") is not None and a["registers"] != b["registers"]:
        out.append(f"registers per thread {a['registers']:.0f} -> {b['registers']:.0f}")
    if (a.get("spill_bytes") or 0) != (b.get("spill_bytes") or 0):
        out.append(f"spilled bytes {a.get('spill_bytes') or 0:,.0f} -> {b.get('spill_bytes') or 0:,.0f}")
    return out or ["no metric changed by more than 10%"]


# ----------------------------------------------------------------------------------------- building one

