/* float16 -> float32, exact: every float16 value is a float32 value (subnormals normalised, the
   signs of zero, infinities and NaN payloads kept). Shared by the kernels that read the file's
   float16 scales; engine/native.py hashes this header into every kernel's cache key. */

#ifndef VERISPEC_HALF_FLOAT_H
#define VERISPEC_HALF_FLOAT_H

#include <stdint.h>
#include <string.h>

static inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1fu) {
        bits = sign | 0x7f800000u | (man << 13); /* inf, NaN */
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign; /* zero */
    } else {         /* subnormal: normalise */
        exp = 113u;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp--;
        }
        bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

#endif
