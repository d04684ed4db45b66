/* CRC-32 (zlib's, the one RocketMQ stores as a record's BODYCRC) with carry-less multiplication
 * where the CPU has it: 64 bytes folded per step, then a Barrett reduction, as Intel's white
 * paper "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ" and Linux's
 * crc32-pclmul (constants for the bit-reflected polynomial 0xEDB88320) do it. Lengths under
 * 64 bytes and the last len % 16 bytes go byte by byte through a table. The result is zlib's crc32 bit for bit
 * (tests compare the two on random data of every length). */
#ifndef FERRYMQ_CRC32_FOLD_H
#define FERRYMQ_CRC32_FOLD_H

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define FERRYMQ_CRC32_FOLD 1

__attribute__((target("pclmul,sse4.1")))
static uint32_t ferrymq_crc32_fold_le(uint32_t crc, const unsigned char *p, size_t len)
{
    /* len >= 64 and a multiple of 16; crc without zlib's pre/post inversion. */
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    __m128i x1, x2, x3, x4, x5, x6, x7, x8, y1, y2, y3, y4;

    x1 = _mm_loadu_si128((const __m128i *)(p + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(p + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(p + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(p + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    p += 64;
    len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
        x6 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        x7 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
        x8 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
        x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
        x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
        x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
        y1 = _mm_loadu_si128((const __m128i *)(p + 0x00));
        y2 = _mm_loadu_si128((const __m128i *)(p + 0x10));
        y3 = _mm_loadu_si128((const __m128i *)(p + 0x20));
        y4 = _mm_loadu_si128((const __m128i *)(p + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y1);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y2);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y3);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y4);
        p += 64;
        len -= 64;
    }
    /* Fold the four lanes into one. */
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), x2);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), x3);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), x4);
    /* Remaining 16-byte blocks. */
    while (len >= 16) {
        x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
        y1 = _mm_loadu_si128((const __m128i *)p);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y1);
        p += 16;
        len -= 16;
    }
    /* 128 -> 64 bits (appending 32 zero bits), then 64 -> 32 bits. */
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, mask32);
    x1 = _mm_clmulepi64_si128(x1, k5, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    /* Barrett reduction. */
    x2 = x1;
    x1 = _mm_and_si128(x1, mask32);
    x1 = _mm_clmulepi64_si128(x1, poly, 0x10);
    x1 = _mm_and_si128(x1, mask32);
    x1 = _mm_clmulepi64_si128(x1, poly, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

static int ferrymq_crc32_fold_ok = -1;

static inline int ferrymq_crc32_fold_usable(void)
{
    if (ferrymq_crc32_fold_ok < 0) {
        __builtin_cpu_init();
        ferrymq_crc32_fold_ok = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    }
    return ferrymq_crc32_fold_ok;
}
#else
#define FERRYMQ_CRC32_FOLD 0
#endif

/* Tables, eight bytes a step ("slicing by 8"), for short runs (keys, a body's last bytes):
 * zlib's crc32 costs a fixed ~170 ns a call whatever the length, more than these bytes. */
static uint32_t ferrymq_crc32_table[8][256];

static void ferrymq_crc32_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320U ^ (c >> 1) : c >> 1;
        ferrymq_crc32_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = ferrymq_crc32_table[t - 1][i];
            ferrymq_crc32_table[t][i] = (c >> 8) ^ ferrymq_crc32_table[0][c & 0xFF];
        }
#if FERRYMQ_CRC32_FOLD
    (void)ferrymq_crc32_fold_usable();
#endif
}

static inline uint32_t ferrymq_crc32_bytes(uint32_t crc, const unsigned char *p, size_t len)
{
    const uint32_t (*t)[256] = ferrymq_crc32_table;
    crc = ~crc;
    while (len >= 8) {
        uint32_t one = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
                              | (uint32_t)p[3] << 24);
        crc = t[7][one & 0xFF] ^ t[6][(one >> 8) & 0xFF] ^ t[5][(one >> 16) & 0xFF]
              ^ t[4][one >> 24] ^ t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = t[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

/* zlib's crc32(crc, p, len) for any length; ferrymq_crc32_init must have run. */
static inline unsigned long ferrymq_crc32(unsigned long crc, const unsigned char *p, size_t len)
{
    if (len < 64)
        return ferrymq_crc32_bytes((uint32_t)crc, p, len);
#if FERRYMQ_CRC32_FOLD
    if (ferrymq_crc32_fold_usable()) {
        size_t head = len & ~(size_t)15;
        crc = ~ferrymq_crc32_fold_le(~(uint32_t)crc, p, head) & 0xFFFFFFFFUL;
        return ferrymq_crc32_bytes((uint32_t)crc, p + head, len - head);
    }
#endif
    while (len > 0x40000000) {
        crc = crc32(crc, p, 0x40000000);
        p += 0x40000000;
        len -= 0x40000000;
    }
    return crc32(crc, p, (unsigned int)len);
}

#endif
