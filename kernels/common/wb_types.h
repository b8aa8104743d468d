// 16-bit storage types shared by the CPU and CUDA variants: just the bits. Conversions live in
// wb_cpu.h (host) and wb_cuda.h (device); arithmetic is always done in float.
#pragma once

#include <stdint.h>

struct wb_half_t { uint16_t bits; };   // IEEE binary16 (torch.float16)
struct wb_bf16_t { uint16_t bits; };   // bfloat16 (torch.bfloat16)
