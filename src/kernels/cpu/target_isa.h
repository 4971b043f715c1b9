// Target attributes for kernels compiled for one instruction set beside the build's baseline and
// called only after a run-time check that the CPU has it.
#pragma once

// AVX2 with FMA and F16C (every x86-64 CPU since Haswell / Zen 1).
#define TP_AVX2 __attribute__((target("avx2,fma,f16c")))
