// TP_UNROLL before a loop over a register block's rows: the loop is unrolled completely before
// GCC's scalar replacement of aggregates runs, so an array of accumulators (__m512 acc[W][R])
// lives in registers. Without it, at -O3 (-fpeel-loops) GCC unrolls these loops later and keeps
// the array in memory as well: every iteration of the K loop stores all of it (measured: the
// AVX512-BF16 kernel ran at 40-50% of its speed). Check with objdump for zmm stores to (%rsp).
#pragma once

#define TP_UNROLL _Pragma("GCC unroll 16")
