# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled decoder of PULL_MESSAGE bodies into column buffers, for the Spark source.

One pass over the records checks that every one is of the common kind (see `columns`) and
sizes the columns; a second writes them. The buffers are Arrow's own layouts (int32 offsets,
native integers, validity bitmaps), so `decode.py` wraps them in arrays without copying. No
pyarrow here: the module stays a plain C extension, and its twin is the Arrow-kernel decoder
(`decode_kernels.py`), which gives the same rows."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcmp, memcpy, memset

from ..common._endian cimport rd32, rd64

from ..common.record import layout as L

IMPLEMENTATION = "cython"

cdef int32_t MAGIC = L.MESSAGE_MAGIC_CODE
cdef Py_ssize_t MIN_RECORD = L.MIN_RECORD_SIZE
cdef int32_t SLOW_FLAGS = L.SYSFLAG_COMPRESSED | L.SYSFLAG_BORNHOST_V6 | L.SYSFLAG_STOREHOST_V6
cdef Py_ssize_t P_MAGIC = L.POS_MAGIC
cdef Py_ssize_t P_QUEUEID = L.POS_QUEUEID
cdef Py_ssize_t P_QUEUEOFFSET = L.POS_QUEUEOFFSET
cdef Py_ssize_t P_SYSFLAG = L.POS_SYSFLAG
cdef Py_ssize_t P_BORNTS = L.POS_BORNTIMESTAMP
cdef Py_ssize_t P_STORETS = L.POS_STORETIMESTAMP_V4
cdef Py_ssize_t P_RECONSUME = L.POS_RECONSUMETIMES_V4
cdef Py_ssize_t P_BODYLEN = L.POS_BODYLEN_V4
cdef Py_ssize_t P_BODY = L.POS_BODY_V4

cdef enum:
    # More pairs than this in one record: the exact path (the duplicate check is quadratic).
    MAX_PAIRS = 64
    # Which of the looked-up properties a pair is.
    K_OTHER = 0
    K_UNIQ = 1
    K_KEYS = 2
    K_TAGS = 3


cdef inline int which_key(const unsigned char* k, Py_ssize_t n) noexcept nogil:
    if n == 8 and memcmp(k, b"UNIQ_KEY", 8) == 0:
        return K_UNIQ
    if n == 4 and memcmp(k, b"KEYS", 4) == 0:
        return K_KEYS
    if n == 4 and memcmp(k, b"TAGS", 4) == 0:
        return K_TAGS
    return K_OTHER


cdef Py_ssize_t parse_props(const unsigned char* p, Py_ssize_t n, Py_ssize_t* spans) noexcept nogil:
    """`key \\x01 value \\x02` pairs into spans (key start, key length, value start, value
    length, relative to p); the count, or -1 when the text is not strictly that: a key that is
    empty, a separator out of turn, a missing final \\x02, too many pairs. The exact codec is
    lenient about all of these, so they are left to it."""
    cdef Py_ssize_t i = 0, start = 0, pairs = 0, key_end = -1
    cdef unsigned char c
    if n == 0 or p[n - 1] != 2:
        return -1
    while i < n:
        c = p[i]
        if c == 1:
            if key_end >= 0 or i == start:
                return -1
            key_end = i
        elif c == 2:
            if key_end < 0 or pairs == MAX_PAIRS:
                return -1
            spans[4 * pairs] = start
            spans[4 * pairs + 1] = key_end - start
            spans[4 * pairs + 2] = key_end + 1
            spans[4 * pairs + 3] = i - key_end - 1
            pairs += 1
            start = i + 1
            key_end = -1
        i += 1
    return pairs


cdef bint unique_keys(const unsigned char* p, const Py_ssize_t* spans, Py_ssize_t pairs) noexcept nogil:
    cdef Py_ssize_t a, b
    for a in range(1, pairs):
        for b in range(a):
            if spans[4 * a + 1] == spans[4 * b + 1] and memcmp(
                p + spans[4 * a], p + spans[4 * b], spans[4 * a + 1]
            ) == 0:
                return False
    return True


cdef inline unsigned char* new_buffer(list out, Py_ssize_t size):
    cdef bytes b = PyBytes_FromStringAndSize(NULL, size)
    out.append(b)
    return <unsigned char*>PyBytes_AS_STRING(b)


cdef inline void put_i32(unsigned char* dst, Py_ssize_t i, int32_t v) noexcept nogil:
    memcpy(dst + 4 * i, &v, 4)


cdef inline void put_i64(unsigned char* dst, Py_ssize_t i, int64_t v) noexcept nogil:
    memcpy(dst + 8 * i, &v, 8)


def columns(buf):
    """The columns of every record in `buf` (records back to back), or None when any record
    is not of the common kind: RocketMQ's V1 magic, IPv4 hosts, an uncompressed body,
    properties in strict `k\\x01v\\x02` form with distinct non-empty keys and a UNIQ_KEY, and
    fields that end exactly where the record does. None sends the whole response to the exact
    codec, which also reports what is wrong with a broken one.

    Returns (n, pairs, buffers): buffers in the order topic offsets, topic data, queue id,
    queue offset, msg id offsets, msg id data, keys validity, keys offsets, keys data, tags
    validity, tags offsets, tags data, body offsets, body data, map offsets, property key
    offsets, property key data, property value offsets, property value data, born timestamp
    (microseconds), store timestamp (microseconds), reconsume times. Strings are not checked
    for UTF-8 here: the caller validates the arrays."""
    cdef Py_buffer view
    cdef const unsigned char* base
    cdef const unsigned char* r
    cdef const unsigned char* props
    cdef Py_ssize_t size, pos, n = 0, pairs_total = 0, body_len, topic_len, props_len, props_at
    cdef Py_ssize_t pairs, j, kind
    cdef Py_ssize_t topic_bytes = 0, body_bytes = 0, key_bytes = 0, value_bytes = 0
    cdef Py_ssize_t uniq_bytes = 0, keys_bytes = 0, tags_bytes = 0
    cdef Py_ssize_t spans[4 * MAX_PAIRS]
    cdef Py_ssize_t found[4]
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        base = <const unsigned char*>view.buf
        if view.len > 0x7FFFFFFF:
            return None
        # Pass 1: check every record and size every column.
        pos = 0
        while pos < view.len:
            if view.len - pos < MIN_RECORD:
                return None
            r = base + pos
            size = rd32(r)
            if size < MIN_RECORD or size > view.len - pos:
                return None
            if rd32(r + P_MAGIC) != MAGIC or rd32(r + P_SYSFLAG) & SLOW_FLAGS:
                return None
            body_len = rd32(r + P_BODYLEN)
            if body_len < 0 or P_BODY + body_len + 1 + 2 > size:
                return None
            topic_len = r[P_BODY + body_len]
            props_at = P_BODY + body_len + 1 + topic_len + 2
            if props_at > size:
                return None
            props_len = (<Py_ssize_t>r[props_at - 2] << 8) | r[props_at - 1]
            # A length with the sign bit set is a negative short to RocketMQ: the exact path.
            if props_len > 0x7FFF or props_at + props_len != size:
                return None
            props = r + props_at
            pairs = parse_props(props, props_len, spans)
            if pairs <= 0 or not unique_keys(props, spans, pairs):
                return None
            found[K_UNIQ] = found[K_KEYS] = found[K_TAGS] = -1
            for j in range(pairs):
                key_bytes += spans[4 * j + 1]
                value_bytes += spans[4 * j + 3]
                kind = which_key(props + spans[4 * j], spans[4 * j + 1])
                if kind != K_OTHER:
                    found[kind] = j
            if found[K_UNIQ] < 0 or spans[4 * found[K_UNIQ] + 3] == 0:
                # No (or an empty) UNIQ_KEY: the message id is the offset id, which needs the
                # store host and the physical offset: the exact path.
                return None
            uniq_bytes += spans[4 * found[K_UNIQ] + 3]
            if found[K_KEYS] >= 0:
                keys_bytes += spans[4 * found[K_KEYS] + 3]
            if found[K_TAGS] >= 0:
                tags_bytes += spans[4 * found[K_TAGS] + 3]
            topic_bytes += topic_len
            body_bytes += body_len
            pairs_total += pairs
            n += 1
            pos += size
        return n, pairs_total, _fill(base, view.len, n, pairs_total, topic_bytes, body_bytes,
                                     key_bytes, value_bytes, uniq_bytes, keys_bytes, tags_bytes)
    finally:
        PyBuffer_Release(&view)


cdef list _fill(const unsigned char* base, Py_ssize_t length, Py_ssize_t n, Py_ssize_t m,
                Py_ssize_t topic_bytes, Py_ssize_t body_bytes, Py_ssize_t key_bytes,
                Py_ssize_t value_bytes, Py_ssize_t uniq_bytes, Py_ssize_t keys_bytes,
                Py_ssize_t tags_bytes):
    """Pass 2: the records were checked by pass 1, so only the writing is left."""
    cdef list out = []
    cdef Py_ssize_t bitmap = (n + 7) // 8
    cdef unsigned char* topic_off = new_buffer(out, 4 * (n + 1))
    cdef unsigned char* topic_data = new_buffer(out, topic_bytes)
    cdef unsigned char* qid = new_buffer(out, 4 * n)
    cdef unsigned char* qoff = new_buffer(out, 8 * n)
    cdef unsigned char* uniq_off = new_buffer(out, 4 * (n + 1))
    cdef unsigned char* uniq_data = new_buffer(out, uniq_bytes)
    cdef unsigned char* keys_valid = new_buffer(out, bitmap)
    cdef unsigned char* keys_off = new_buffer(out, 4 * (n + 1))
    cdef unsigned char* keys_data = new_buffer(out, keys_bytes)
    cdef unsigned char* tags_valid = new_buffer(out, bitmap)
    cdef unsigned char* tags_off = new_buffer(out, 4 * (n + 1))
    cdef unsigned char* tags_data = new_buffer(out, tags_bytes)
    cdef unsigned char* body_off = new_buffer(out, 4 * (n + 1))
    cdef unsigned char* body_data = new_buffer(out, body_bytes)
    cdef unsigned char* map_off = new_buffer(out, 4 * (n + 1))
    cdef unsigned char* pkey_off = new_buffer(out, 4 * (m + 1))
    cdef unsigned char* pkey_data = new_buffer(out, key_bytes)
    cdef unsigned char* pval_off = new_buffer(out, 4 * (m + 1))
    cdef unsigned char* pval_data = new_buffer(out, value_bytes)
    cdef unsigned char* born = new_buffer(out, 8 * n)
    cdef unsigned char* store = new_buffer(out, 8 * n)
    cdef unsigned char* reconsume = new_buffer(out, 4 * n)
    cdef const unsigned char* r
    cdef const unsigned char* props
    cdef Py_ssize_t spans[4 * MAX_PAIRS]
    cdef Py_ssize_t pos = 0, i, j, k = 0, pairs, body_len, topic_len, props_at, kind, span
    cdef int32_t t_at = 0, u_at = 0, ky_at = 0, tg_at = 0, b_at = 0, pk_at = 0, pv_at = 0
    memset(keys_valid, 0, bitmap)
    memset(tags_valid, 0, bitmap)
    put_i32(topic_off, 0, 0)
    put_i32(uniq_off, 0, 0)
    put_i32(keys_off, 0, 0)
    put_i32(tags_off, 0, 0)
    put_i32(body_off, 0, 0)
    put_i32(map_off, 0, 0)
    put_i32(pkey_off, 0, 0)
    put_i32(pval_off, 0, 0)
    for i in range(n):
        r = base + pos
        pos += rd32(r)
        put_i32(qid, i, rd32(r + P_QUEUEID))
        put_i64(qoff, i, rd64(r + P_QUEUEOFFSET))
        put_i64(born, i, rd64(r + P_BORNTS) * 1000)
        put_i64(store, i, rd64(r + P_STORETS) * 1000)
        put_i32(reconsume, i, rd32(r + P_RECONSUME))
        body_len = rd32(r + P_BODYLEN)
        memcpy(body_data + b_at, r + P_BODY, body_len)
        b_at += <int32_t>body_len
        put_i32(body_off, i + 1, b_at)
        topic_len = r[P_BODY + body_len]
        memcpy(topic_data + t_at, r + P_BODY + body_len + 1, topic_len)
        t_at += <int32_t>topic_len
        put_i32(topic_off, i + 1, t_at)
        props_at = P_BODY + body_len + 1 + topic_len + 2
        props = r + props_at
        pairs = parse_props(props, rd32(r) - props_at, spans)
        for j in range(pairs):
            memcpy(pkey_data + pk_at, props + spans[4 * j], spans[4 * j + 1])
            pk_at += <int32_t>spans[4 * j + 1]
            k += 1
            put_i32(pkey_off, k, pk_at)
            span = spans[4 * j + 3]
            memcpy(pval_data + pv_at, props + spans[4 * j + 2], span)
            pv_at += <int32_t>span
            put_i32(pval_off, k, pv_at)
            kind = which_key(props + spans[4 * j], spans[4 * j + 1])
            if kind == K_UNIQ:
                memcpy(uniq_data + u_at, props + spans[4 * j + 2], span)
                u_at += <int32_t>span
            elif kind == K_KEYS:
                memcpy(keys_data + ky_at, props + spans[4 * j + 2], span)
                ky_at += <int32_t>span
                keys_valid[i >> 3] |= 1 << (i & 7)
            elif kind == K_TAGS:
                memcpy(tags_data + tg_at, props + spans[4 * j + 2], span)
                tg_at += <int32_t>span
                tags_valid[i >> 3] |= 1 << (i & 7)
        put_i32(map_off, i + 1, <int32_t>k)
        put_i32(uniq_off, i + 1, u_at)
        put_i32(keys_off, i + 1, ky_at)
        put_i32(tags_off, i + 1, tg_at)
    return out
