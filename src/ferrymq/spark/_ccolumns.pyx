# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled decoder of PULL_MESSAGE bodies into column buffers, for the Spark source.

One pass over the records checks that every one is of the common kind (see `columns`) and
sizes the columns; a second writes them. The buffers are Arrow's own layouts (int32 offsets,
native integers, validity bitmaps), so `decode.py` wraps them in arrays without copying. No
pyarrow here: the module stays a plain C extension, and its twin is the Arrow-kernel decoder
(`decode_kernels.py`), which gives the same rows."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memchr, memcmp, memcpy, memset

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
    lenient about all of these, so they are left to it. The separators are found with memchr
    (a byte-at-a-time loop was most of the decoder's time)."""
    cdef Py_ssize_t start = 0, pairs = 0, end, key_end
    cdef const unsigned char* hit
    if n == 0 or p[n - 1] != 2:
        return -1
    while start < n:
        # The item ends at the next \\x02 (there is one: the text ends with it); it must hold
        # exactly one \\x01, not at its start.
        end = <const unsigned char*>memchr(p + start, 2, n - start) - p
        hit = <const unsigned char*>memchr(p + start, 1, end - start)
        if hit == NULL:
            return -1
        key_end = hit - p
        if key_end == start or pairs == MAX_PAIRS:
            return -1
        if memchr(p + key_end + 1, 1, end - key_end - 1) != NULL:
            return -1
        spans[4 * pairs] = start
        spans[4 * pairs + 1] = key_end - start
        spans[4 * pairs + 2] = key_end + 1
        spans[4 * pairs + 3] = end - key_end - 1
        pairs += 1
        start = end + 1
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


cdef struct Sizes:
    # Pass 1's totals: records, property pairs, and the bytes of each variable-width column.
    Py_ssize_t n, pairs, topic, body, key, value, uniq, keys, tags


def columns(bufs):
    """The columns of every record in `bufs` (one buffer, or a list of them, each holding
    whole records back to back: the bodies of consecutive pulls, decoded without joining
    them), or None when any record is not of the common kind: RocketMQ's V1 magic, IPv4
    hosts, an uncompressed body, properties in strict `k\\x01v\\x02` form with distinct
    non-empty keys and a non-empty UNIQ_KEY, and fields that end exactly where the record
    does. None sends the whole response to the exact codec, which also reports what is wrong
    with a broken one.

    Returns (n, pairs, buffers): buffers in the order topic offsets, topic data, queue id,
    queue offset, msg id offsets, msg id data, keys validity, keys offsets, keys data, tags
    validity, tags offsets, tags data, body offsets, body data, map offsets, property key
    offsets, property key data, property value offsets, property value data, born timestamp
    (microseconds), store timestamp (microseconds), reconsume times. Strings are not checked
    for UTF-8 here: the caller validates the arrays."""
    if not isinstance(bufs, (list, tuple)):
        bufs = (bufs,)
    cdef Py_ssize_t k = len(bufs), b, held = 0, length = 0
    cdef Py_buffer* views = <Py_buffer*>PyMem_Malloc(max(k, 1) * sizeof(Py_buffer))
    cdef Sizes sz
    if views == NULL:
        raise MemoryError()
    try:
        for b in range(k):
            PyObject_GetBuffer(bufs[b], &views[b], PyBUF_SIMPLE)
            held += 1
            length += views[b].len
        if length > 0x7FFFFFFF:  # int32 offsets
            return None
        memset(&sz, 0, sizeof(sz))
        for b in range(k):
            if not _measure(<const unsigned char*>views[b].buf, views[b].len, &sz):
                return None
        return sz.n, sz.pairs, _fill(views, k, &sz)
    finally:
        for b in range(held):
            PyBuffer_Release(&views[b])
        PyMem_Free(views)


cdef bint _measure(const unsigned char* base, Py_ssize_t length, Sizes* sz):
    """Pass 1 over one buffer: check every record and add its fields to the column sizes."""
    cdef const unsigned char* r
    cdef const unsigned char* props
    cdef Py_ssize_t size, pos = 0, body_len, topic_len, props_len, props_at, pairs, j, kind
    cdef Py_ssize_t spans[4 * MAX_PAIRS]
    cdef Py_ssize_t found[4]
    while pos < length:
        if length - pos < MIN_RECORD:
            return False
        r = base + pos
        size = rd32(r)
        if size < MIN_RECORD or size > length - pos:
            return False
        if rd32(r + P_MAGIC) != MAGIC or rd32(r + P_SYSFLAG) & SLOW_FLAGS:
            return False
        body_len = rd32(r + P_BODYLEN)
        if body_len < 0 or P_BODY + body_len + 1 + 2 > size:
            return False
        topic_len = r[P_BODY + body_len]
        props_at = P_BODY + body_len + 1 + topic_len + 2
        if props_at > size:
            return False
        props_len = (<Py_ssize_t>r[props_at - 2] << 8) | r[props_at - 1]
        # A length with the sign bit set is a negative short to RocketMQ: the exact path.
        if props_len > 0x7FFF or props_at + props_len != size:
            return False
        props = r + props_at
        pairs = parse_props(props, props_len, spans)
        if pairs <= 0 or not unique_keys(props, spans, pairs):
            return False
        found[K_UNIQ] = found[K_KEYS] = found[K_TAGS] = -1
        for j in range(pairs):
            sz.key += spans[4 * j + 1]
            sz.value += spans[4 * j + 3]
            kind = which_key(props + spans[4 * j], spans[4 * j + 1])
            if kind != K_OTHER:
                found[kind] = j
        if found[K_UNIQ] < 0 or spans[4 * found[K_UNIQ] + 3] == 0:
            # No (or an empty) UNIQ_KEY: the message id is the offset id, which needs the
            # store host and the physical offset: the exact path.
            return False
        sz.uniq += spans[4 * found[K_UNIQ] + 3]
        if found[K_KEYS] >= 0:
            sz.keys += spans[4 * found[K_KEYS] + 3]
        if found[K_TAGS] >= 0:
            sz.tags += spans[4 * found[K_TAGS] + 3]
        sz.topic += topic_len
        sz.body += body_len
        sz.pairs += pairs
        sz.n += 1
        pos += size
    return True


cdef list _fill(const Py_buffer* views, Py_ssize_t k, const Sizes* sz):
    """Pass 2: the records were checked by pass 1, so only the writing is left."""
    cdef list out = []
    cdef Py_ssize_t n = sz.n, m = sz.pairs
    cdef Py_ssize_t bitmap = (n + 7) // 8
    cdef unsigned char* topic_off = new_buffer(out, 4 * (n + 1))
    cdef unsigned char* topic_data = new_buffer(out, sz.topic)
    cdef unsigned char* qid = new_buffer(out, 4 * n)
    cdef unsigned char* qoff = new_buffer(out, 8 * n)
    cdef unsigned char* uniq_off = new_buffer(out, 4 * (n + 1))
    cdef unsigned char* uniq_data = new_buffer(out, sz.uniq)
    cdef unsigned char* keys_valid = new_buffer(out, bitmap)
    cdef unsigned char* keys_off = new_buffer(out, 4 * (n + 1))
    cdef unsigned char* keys_data = new_buffer(out, sz.keys)
    cdef unsigned char* tags_valid = new_buffer(out, bitmap)
    cdef unsigned char* tags_off = new_buffer(out, 4 * (n + 1))
    cdef unsigned char* tags_data = new_buffer(out, sz.tags)
    cdef unsigned char* body_off = new_buffer(out, 4 * (n + 1))
    cdef unsigned char* body_data = new_buffer(out, sz.body)
    cdef unsigned char* map_off = new_buffer(out, 4 * (n + 1))
    cdef unsigned char* pkey_off = new_buffer(out, 4 * (m + 1))
    cdef unsigned char* pkey_data = new_buffer(out, sz.key)
    cdef unsigned char* pval_off = new_buffer(out, 4 * (m + 1))
    cdef unsigned char* pval_data = new_buffer(out, sz.value)
    cdef unsigned char* born = new_buffer(out, 8 * n)
    cdef unsigned char* store = new_buffer(out, 8 * n)
    cdef unsigned char* reconsume = new_buffer(out, 4 * n)
    cdef const unsigned char* r
    cdef const unsigned char* props
    cdef Py_ssize_t spans[4 * MAX_PAIRS]
    cdef const unsigned char* base
    cdef Py_ssize_t pos, i = 0, b, j, pair = 0, pairs, body_len, topic_len, props_at, kind, span
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
    for b in range(k):
        base = <const unsigned char*>views[b].buf
        pos = 0
        while pos < views[b].len:
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
                pair += 1
                put_i32(pkey_off, pair, pk_at)
                span = spans[4 * j + 3]
                memcpy(pval_data + pv_at, props + spans[4 * j + 2], span)
                pv_at += <int32_t>span
                put_i32(pval_off, pair, pv_at)
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
            put_i32(map_off, i + 1, <int32_t>pair)
            put_i32(uniq_off, i + 1, u_at)
            put_i32(keys_off, i + 1, ky_at)
            put_i32(tags_off, i + 1, tg_at)
            i += 1
    return out
