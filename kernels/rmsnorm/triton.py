# rmsnorm, the second way: fused Triton kernels. What it changes over the PyTorch formula (five
# kernels, each a trip through memory): one read of x, one write of y, the byte floor. Each program
# takes one row: it loads the row and the weight into registers, reduces the sum of squares in
# float, and writes y = x * rsqrt(mean(x^2) + eps) * w, rounded once to the dtype. Rows longer
# than ROW_CAP elements (BACKWARD_ROW_CAP in the backward) do not fit in a block's registers: they
# loop over the row in chunks of LOOP_CHUNK, reading x twice (the sum of squares, then y).
# Backward, per row: rstd is recomputed from x, not saved (r = rsqrt(mean(x^2) + eps); g = dy * w;
# dx = r * g - x * r^3 * mean(g * x)): x and dy read once, dx written once. dweight = the sum over
# rows of dy * x * r: each program walks a fixed set of rows (program, program + programs, ...;
# programs = min(rows, SMs x 32 / num_warps)), adds into float registers, and writes one partial
# row of h floats (never more floats than x has elements); a second small Triton kernel adds the
# partial rows column by column in program order, in float, then rounds. No atomics: dweight is
# bit-identical run to run. Long rows: a first pass stores each of the program's rows' r and
# mean(g * x), then chunk by chunk it writes dx and its partials (x and dy read twice).
# The workbench registers forward and backward with torch.library.triton_op: torch.compile sees
# these kernels (no graph break) and autograd calls the backward. rstd is cast to float32 where it
# is computed: under torch.compile, inductor passes eps as a float64 scalar, which would otherwise
# promote the row math (and the dweight registers) to float64.
# Host side: a call runs only what its launch needs (block size by int.bit_length, not Triton's
# constexpr helper; the output by empty_like, not new_empty's shape parsing). Issue 26 asked for the
# handle within 2x of a bare cached launch. results/gpu/bdae8f9-h100/call_path.log measured 2.11x
# with bit_length (2.80x before). empty_like was predicted to take ~2 us more off on the H100's host
# (1.1 us on the 2-core machine), about 2.0x; results/gpu/b78cb11-h100/call_path.log measured 1.85x,
# with the handle's leaner Python path (b78cb11) in the same run.
import math

import torch
import triton
import triton.language as tl

WB_VARIANT = {
    "op": "rmsnorm",
    "device": "cuda",
    "dtypes": ("float32", "float16", "bfloat16"),
    "description": "fused Triton: a program per row, the row in registers (x read once); dweight from "
                   "per-program float partial rows, fixed-order sum",
    "kind": "triton",
}

# The longest rows kept in registers, 16 warps a program: the forward holds x and w (98 registers
# a thread at 16384 floats), the backward x, dy, w and the dweight sums (128 at 8192; ptxas spills
# ~450 bytes a thread at 16384, sm_90).
ROW_CAP = 16384
BACKWARD_ROW_CAP = 8192
LOOP_CHUNK = 4096      # longer rows: chunks of this many elements
SUM_BLOCK = 1024       # the partials' final pass: columns per program
WARPS_PER_SM = 32      # backward programs: about this many warps resident per SM


@triton.jit
def _forward_kernel(x_ptr, w_ptr, y_ptr, h, eps, BLOCK: tl.constexpr, LOOP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row, y_row = x_ptr + row * h, y_ptr + row * h
    cols = tl.arange(0, BLOCK)
    if LOOP:  # x read twice: the sum of squares, then y
        sq = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, h, BLOCK):
            x = tl.load(x_row + start + cols, mask=start + cols < h, other=0.0).to(tl.float32)
            sq += x * x
        r = tl.rsqrt(tl.sum(sq, axis=0) / h + eps).to(tl.float32)
        for start in range(0, h, BLOCK):
            mask = start + cols < h
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + start + cols, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)
    else:  # the row in registers: one read of x, one write of y
        mask = cols < h
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.rsqrt(tl.sum(x * x, axis=0) / h + eps).to(tl.float32)
        tl.store(y_row + cols, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _backward_kernel(dy_ptr, x_ptr, w_ptr, dx_ptr, partial_ptr, stats_ptr, rows, h, eps, programs,
                     BLOCK: tl.constexpr, LOOP: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    part_row = partial_ptr + pid.to(tl.int64) * h
    if LOOP:
        # Pass 1: each of this program's rows' r and mean(g * x), kept in stats (2 floats a row).
        for row in range(pid, rows, programs):
            base = tl.cast(row, tl.int64) * h
            sq = tl.zeros([BLOCK], dtype=tl.float32)
            gx = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(0, h, BLOCK):
                mask = start + cols < h
                x = tl.load(x_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
                w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
                sq += x * x
                gx += dy * w * x
            tl.store(stats_ptr + 2 * row, tl.rsqrt(tl.sum(sq, axis=0) / h + eps).to(tl.float32))
            tl.store(stats_ptr + 2 * row + 1, tl.sum(gx, axis=0) / h)
        # Pass 2, chunk by chunk: dx of every row of this program, and their dweight partial sums.
        for start in range(0, h, BLOCK):
            mask = start + cols < h
            w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            dw = tl.zeros([BLOCK], dtype=tl.float32)
            for row in range(pid, rows, programs):
                base = tl.cast(row, tl.int64) * h
                r = tl.load(stats_ptr + 2 * row)
                c = tl.load(stats_ptr + 2 * row + 1)
                x = tl.load(x_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
                dx = r * dy * w - x * (r * r * r) * c
                tl.store(dx_ptr + base + start + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
                dw += dy * x * r
            tl.store(part_row + start + cols, dw, mask=mask)
    else:
        mask = cols < h
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)  # once per program
        dw = tl.zeros([BLOCK], dtype=tl.float32)
        for row in range(pid, rows, programs):
            base = tl.cast(row, tl.int64) * h
            x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
            r = tl.rsqrt(tl.sum(x * x, axis=0) / h + eps).to(tl.float32)
            g = dy * w
            c = tl.sum(g * x, axis=0) / h
            dx = r * g - x * (r * r * r) * c
            tl.store(dx_ptr + base + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
            dw += dy * x * r
        tl.store(part_row + cols, dw, mask=mask)


@triton.jit
def _sum_partials_kernel(partial_ptr, out_ptr, n, h, BLOCK: tl.constexpr):
    # Column block by column block, the partial rows added in program order: a fixed order.
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < h
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, n):
        acc += tl.load(partial_ptr + tl.cast(i, tl.int64) * h + cols, mask=mask, other=0.0)
    tl.store(out_ptr + cols, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _plan(h, cap):
    """(block, loop, num_warps) for a row of h elements: the whole row as one power-of-two block up
    to `cap`, else chunks of LOOP_CHUNK; warps grow with the block (256 elements each, 1 to 16)."""
    h = int(h)  # block sizes are constexprs: concrete even where torch.compile traces a symbolic h
    loop = h > cap
    # 1 << bit_length, not triton.next_power_of_2: that one is a constexpr function in Triton 3.x,
    # a few microseconds a call through its wrapper, and this runs on every call (issue 26).
    block = LOOP_CHUNK if loop else 1 << max(h - 1, 0).bit_length()
    return block, loop, min(max(block // 256, 1), 16)


def _rows(x):
    h = x.shape[-1]  # numel // h, not a product over the leading dims: this runs on every call
    return x.numel() // h if h else math.prod(x.shape[:-1])  # 1 for a 1-D x


def _row_major(t):
    """An uninitialised tensor like t, row-major whatever strides t's size-1 dims carry (empty_like
    alone keeps them). Not t.new_empty(t.shape): parsing a shape argument cost twice as much a call."""
    return torch.empty_like(t, memory_format=torch.contiguous_format)


def forward(x, weight, eps):
    y = _row_major(x)
    h, rows = x.shape[-1], _rows(x)
    if h == 0 or rows == 0:
        return y
    block, loop, warps = _plan(h, ROW_CAP)
    torch.library.wrap_triton(_forward_kernel)[(rows,)](x, weight, y, h, eps, BLOCK=block, LOOP=loop,
                                                        num_warps=warps)
    return y


def _programs(rows, warps, device):
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    return min(rows, sms * max(WARPS_PER_SM // warps, 1))


def backward(grad_y, x, weight, eps):
    h, rows = x.shape[-1], _rows(x)
    dx = _row_major(x)
    if h == 0 or rows == 0:
        return dx, torch.zeros_like(weight)  # a sum over no rows
    block, loop, warps = _plan(h, BACKWARD_ROW_CAP)
    programs = _programs(rows, warps, x.device)
    partial = torch.empty((programs, h), dtype=torch.float32, device=x.device)
    stats = torch.empty((2 * rows if loop else 1,), dtype=torch.float32, device=x.device)
    torch.library.wrap_triton(_backward_kernel)[(programs,)](
        grad_y, x, weight, dx, partial, stats, rows, h, eps, programs, BLOCK=block, LOOP=loop, num_warps=warps)
    dweight = _row_major(weight)
    torch.library.wrap_triton(_sum_partials_kernel)[(triton.cdiv(h, SUM_BLOCK),)](
        partial, dweight, programs, h, BLOCK=SUM_BLOCK, num_warps=4)
    return dx, dweight
