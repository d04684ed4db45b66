# Big-endian integer reads and writes shared by the compiled codecs (cimported, inlined).
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t


cdef inline int32_t rd32(const unsigned char* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline int16_t rd16(const unsigned char* p) noexcept nogil:
    return <int16_t>((<uint32_t>p[0] << 8) | p[1])


cdef inline int64_t rd64(const unsigned char* p) noexcept nogil:
    return <int64_t>((<uint64_t><uint32_t>rd32(p) << 32) | <uint32_t>rd32(p + 4))


cdef inline void wr32(unsigned char* p, int64_t v) noexcept nogil:
    cdef uint32_t u = <uint32_t>v
    p[0] = u >> 24
    p[1] = u >> 16
    p[2] = u >> 8
    p[3] = u


cdef inline void wr16(unsigned char* p, int64_t v) noexcept nogil:
    p[0] = (<uint32_t>v) >> 8
    p[1] = <uint32_t>v


cdef inline void wr64(unsigned char* p, int64_t v) noexcept nogil:
    wr32(p, <int64_t>(<uint64_t>v >> 32))
    wr32(p + 4, v)
