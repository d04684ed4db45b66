# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled implementation of the record codec: the same functions as _py.py, with the
same results and the same errors (tests/codec checks both against each other). Every layout
position comes from layout.py, read once when the module loads."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItem, PyDict_Next, PyDict_SetItem
from cpython.list cimport PyList_Append
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memchr, memcmp, memcpy, memset

from .._endian cimport rd16, rd32, rd64, wr16, wr32, wr64

import zlib as _zlib

from ..message import MessageBatchItem
from ..props import PropertyError
from . import layout as L
from ._py import with_property as _with_property
from .view import StoredMessage

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL
    object PyUnicode_FromStringAndSize(const char* s, Py_ssize_t size)
    ctypedef unsigned char Py_UCS1
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    Py_UCS1* PyUnicode_1BYTE_DATA(object u)
    Py_UCS4 PyUnicode_MAX_CHAR_VALUE(object u)
    ctypedef PyObject* (*allocfunc)(PyTypeObject* tp, Py_ssize_t n)
    ctypedef struct TypeWithAlloc "PyTypeObject":
        allocfunc tp_alloc

IMPLEMENTATION = "cython"

cdef int32_t MAGIC = L.MESSAGE_MAGIC_CODE
cdef Py_ssize_t MIN_RECORD = L.MIN_RECORD_SIZE
cdef Py_ssize_t MAX_TOPIC = L.MAX_TOPIC_BYTES
cdef Py_ssize_t MAX_PROPS = L.MAX_PROPERTIES_BYTES
cdef int MARK_TRANSACTION = L.MARK_TRANSACTION
cdef int MARK_TIMER = L.MARK_TIMER
cdef int MARK_DELAY = L.MARK_DELAY
cdef Py_ssize_t P_MAGIC = L.POS_MAGIC
cdef Py_ssize_t P_BODYCRC = L.POS_BODYCRC
cdef Py_ssize_t P_QUEUEID = L.POS_QUEUEID
cdef Py_ssize_t P_FLAG = L.POS_FLAG
cdef Py_ssize_t P_QUEUEOFFSET = L.POS_QUEUEOFFSET
cdef Py_ssize_t P_PHYSICALOFFSET = L.POS_PHYSICALOFFSET
cdef Py_ssize_t P_SYSFLAG = L.POS_SYSFLAG
cdef Py_ssize_t P_BORNTIMESTAMP = L.POS_BORNTIMESTAMP
cdef Py_ssize_t P_BORNHOST = L.POS_BORNHOST
cdef Py_ssize_t P_STORETIMESTAMP_V4 = L.POS_STORETIMESTAMP_V4
cdef Py_ssize_t P_RECONSUME_V4 = L.POS_RECONSUMETIMES_V4
cdef Py_ssize_t P_PREPARED_V4 = L.POS_PREPARED_V4
cdef Py_ssize_t P_BODYLEN_V4 = L.POS_BODYLEN_V4
cdef Py_ssize_t V6_EXTRA = L.IPV6_EXTRA
cdef Py_ssize_t HOST_V4 = L.HOST_V4_SIZE
cdef Py_ssize_t HOST_V6 = L.HOST_V6_SIZE
cdef int32_t F_BORN_V6 = L.SYSFLAG_BORNHOST_V6
cdef int32_t F_STORE_V6 = L.SYSFLAG_STOREHOST_V6
cdef int32_t F_COMPRESSED = L.SYSFLAG_COMPRESSED
cdef Py_ssize_t BATCH_HEAD_SIZE = L.BATCH_HEAD.size
cdef Py_ssize_t BATCH_MIN = L.BATCH_MIN_ENTRY
cdef Py_ssize_t CQ_SIZE = L.CQ_ENTRY.size
cdef unsigned char NV = L.NAME_VALUE_SEPARATOR
cdef unsigned char PS = L.PROPERTY_SEPARATOR

_MessageDecodeError = L.MessageDecodeError
_RecordEncodeError = L.RecordEncodeError
_new_stored = StoredMessage.__new__
_new_tuple = tuple.__new__
_decompress = _zlib.decompress
_zlib_error = _zlib.error
_MessageBatchItem = MessageBatchItem

_TAGS = "TAGS"
_KEYS = "KEYS"
_UNIQ = "UNIQ_KEY"
_DELAY = "DELAY"


cdef extern from "crc32_fold.h":
    # zlib's crc32, folded with carry-less multiplication where the CPU has it.
    unsigned long ferrymq_crc32(unsigned long crc, const unsigned char* p, size_t n) nogil
    void ferrymq_crc32_init()

ferrymq_crc32_init()


cdef inline uint32_t body_crc(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    return ferrymq_crc32(0, p, <size_t>n) & 0x7FFFFFFF


cdef inline object utf8(const unsigned char* p, Py_ssize_t n):
    return PyUnicode_DecodeUTF8(<const char*>p, n, "replace")


# --- properties ----------------------------------------------------------------------------------
cdef object encode_props(dict props):
    cdef Py_ssize_t i = 0, total = 0, kn, vn
    cdef PyObject* k
    cdef PyObject* v
    cdef const char* kp
    cdef const char* vp
    cdef list parts
    if not props:
        return b""
    parts = []
    while PyDict_Next(props, &i, &k, &v):
        kp = PyUnicode_AsUTF8AndSize(<object>k, &kn)
        vp = PyUnicode_AsUTF8AndSize(<object>v, &vn)
        if (memchr(kp, NV, kn) or memchr(kp, PS, kn) or memchr(vp, NV, vn)
                or memchr(vp, PS, vn)):
            raise PropertyError(<object>k, <object>v)
        total += kn + vn + 2
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef unsigned char* o = <unsigned char*>PyBytes_AS_STRING(out)
    i = 0
    while PyDict_Next(props, &i, &k, &v):
        kp = PyUnicode_AsUTF8AndSize(<object>k, &kn)
        vp = PyUnicode_AsUTF8AndSize(<object>v, &vn)
        memcpy(o, kp, kn)
        o[kn] = NV
        memcpy(o + kn + 1, vp, vn)
        o[kn + 1 + vn] = PS
        o += kn + vn + 2
    return out


def zlib_crc32(buf, unsigned long value=0):
    """zlib.crc32 as the compiled codec computes it (tests compare the two)."""
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return ferrymq_crc32(value, <const unsigned char*>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)


def properties_encode(dict props):
    return encode_props(props)


cdef dict decode_props(const unsigned char* p, Py_ssize_t n):
    cdef dict out = {}
    cdef Py_ssize_t i = 0, end, sep
    cdef const unsigned char* hit
    while i <= n:
        hit = <const unsigned char*>memchr(p + i, PS, n - i)
        end = (hit - p) if hit != NULL else n
        hit = <const unsigned char*>memchr(p + i, NV, end - i)
        if hit != NULL:
            sep = hit - p
            if sep > i:
                PyDict_SetItem(out, utf8(p + i, sep - i), utf8(p + sep + 1, end - sep - 1))
        i = end + 1
    return out


def properties_decode(buf):
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return decode_props(<const unsigned char*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


cdef tuple scan_props(const unsigned char* p, Py_ssize_t n):
    cdef object tags = None, keys = None, uniq = None, delay = None
    cdef Py_ssize_t i = 0, end, sep, klen
    cdef const unsigned char* hit
    while i <= n:
        hit = <const unsigned char*>memchr(p + i, PS, n - i)
        end = (hit - p) if hit != NULL else n
        hit = <const unsigned char*>memchr(p + i, NV, end - i)
        if hit != NULL:
            sep = hit - p
            klen = sep - i
            if klen == 4 and memcmp(p + i, b"TAGS", 4) == 0:
                tags = utf8(p + sep + 1, end - sep - 1)
            elif klen == 4 and memcmp(p + i, b"KEYS", 4) == 0:
                keys = utf8(p + sep + 1, end - sep - 1)
            elif klen == 8 and memcmp(p + i, b"UNIQ_KEY", 8) == 0:
                uniq = utf8(p + sep + 1, end - sep - 1)
            elif klen == 5 and memcmp(p + i, b"DELAY", 5) == 0:
                delay = utf8(p + sep + 1, end - sep - 1)
        i = end + 1
    return tags, keys, uniq, delay


def properties_scan(buf):
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return scan_props(<const unsigned char*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


# --- one record ----------------------------------------------------------------------------------
cdef struct Located:
    Py_ssize_t total
    int32_t sys_flag
    Py_ssize_t body_at
    Py_ssize_t body_len
    Py_ssize_t topic_at
    Py_ssize_t props_at


cdef int locate_c(const unsigned char* b, Py_ssize_t pos, Py_ssize_t limit, Located* r) except -1:
    cdef int32_t total, magic, body_len, props_len
    cdef Py_ssize_t end, p, topic_len
    if limit - pos < MIN_RECORD:
        raise _MessageDecodeError(pos, "shorter than the smallest possible record")
    total = rd32(b + pos)
    magic = rd32(b + pos + P_MAGIC)
    if magic != MAGIC:
        raise _MessageDecodeError(pos, f"magic code {<uint32_t>magic:#x} is not a message's")
    if total < MIN_RECORD or pos + total > limit:
        raise _MessageDecodeError(pos, f"total size {total} does not fit the buffer")
    r.sys_flag = rd32(b + pos + P_SYSFLAG)
    end = pos + total
    p = pos + P_BODYLEN_V4
    if r.sys_flag & F_BORN_V6:
        p += V6_EXTRA
    if r.sys_flag & F_STORE_V6:
        p += V6_EXTRA
    if p + 4 > end:  # IPv6 hosts in a record too short for them: the body length is not in it
        raise _MessageDecodeError(pos, "hosts overrun the record")
    body_len = rd32(b + p)
    r.body_at = p + 4
    if body_len < 0 or r.body_at + body_len + 3 > end:
        raise _MessageDecodeError(pos, f"body length {body_len} overruns the record")
    r.body_len = body_len
    r.topic_at = r.body_at + body_len + 1
    topic_len = b[r.topic_at - 1]
    if r.topic_at + topic_len + 2 > end:
        raise _MessageDecodeError(pos, "topic overruns the record")
    props_len = rd16(b + r.topic_at + topic_len)
    r.props_at = r.topic_at + topic_len + 2
    if props_len < 0 or r.props_at + props_len != end:
        raise _MessageDecodeError(pos, "properties do not end where the record ends")
    r.total = total
    return 0


def locate(buf, Py_ssize_t pos, Py_ssize_t limit):
    cdef Py_buffer view
    cdef Located r
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if pos < 0 or limit > view.len:
            raise ValueError("locate: bounds outside the buffer")
        locate_c(<const unsigned char*>view.buf, pos, limit, &r)
    finally:
        PyBuffer_Release(&view)
    return r.total, r.sys_flag, r.body_at, r.body_len, r.topic_at, r.props_at


cdef object decode_one(object buf, const unsigned char* b, Py_ssize_t n, Py_ssize_t pos,
                       object broker, bint decompress, bint check_crc, list topic_cache,
                       Py_ssize_t* total):
    cdef Located r
    cdef Py_ssize_t p, tlen
    cdef int32_t crc
    locate_c(b, pos, n, &r)
    crc = rd32(b + pos + P_BODYCRC)
    body = PyBytes_FromStringAndSize(<const char*>b + r.body_at, r.body_len)
    if check_crc and <int32_t>body_crc(b + r.body_at, r.body_len) != crc:
        raise _MessageDecodeError(pos, "body CRC mismatch")
    if decompress and r.sys_flag & F_COMPRESSED:
        try:
            body = _decompress(body)
        except _zlib_error as exc:
            raise _MessageDecodeError(pos, f"compressed body does not inflate: {exc}") from exc
    tlen = r.props_at - 2 - r.topic_at
    cached = topic_cache[0]
    if cached is not None and len(<bytes>cached) == tlen and memcmp(
            PyBytes_AS_STRING(cached), b + r.topic_at, tlen) == 0:
        topic = topic_cache[1]
    else:
        topic = utf8(b + r.topic_at, tlen)
        topic_cache[0] = PyBytes_FromStringAndSize(<const char*>b + r.topic_at, tlen)
        topic_cache[1] = topic
    p = pos + P_STORETIMESTAMP_V4 + (V6_EXTRA if r.sys_flag & F_BORN_V6 else 0)
    m = _new_stored(StoredMessage)
    m.topic = topic
    m.body = body
    m.flag = rd32(b + pos + P_FLAG)
    m.queue_id = rd32(b + pos + P_QUEUEID)
    m.queue_offset = rd64(b + pos + P_QUEUEOFFSET)
    m.commit_log_offset = rd64(b + pos + P_PHYSICALOFFSET)
    m.sys_flag = r.sys_flag
    m.born_timestamp = rd64(b + pos + P_BORNTIMESTAMP)
    m.store_timestamp = rd64(b + p)
    m.reconsume_times = rd32(b + r.body_at - 16)
    m.prepared_transaction_offset = rd64(b + r.body_at - 12)
    m.body_crc = crc
    m.store_size = r.total
    m.broker = broker
    m._buf = buf
    m._at = pos
    m._props_at = r.props_at
    m._props = None
    m._born_host = None
    m._store_host = None
    m._msg_id = None
    m._offset_msg_id = None
    total[0] = r.total
    return m


def decode_record(buf, Py_ssize_t pos=0, *, broker="", bint decompress=True,
                  bint check_crc=False):
    cdef Py_buffer view
    cdef Py_ssize_t total
    if pos < 0:
        raise ValueError("decode_record: negative position")
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return decode_one(buf, <const unsigned char*>view.buf, view.len, pos, broker,
                          decompress, check_crc, [None, None], &total)
    finally:
        PyBuffer_Release(&view)


def record_info(buf, Py_ssize_t o, int64_t pos, Py_ssize_t limit, info_type):
    cdef Py_buffer view
    cdef Located r
    cdef const unsigned char* b
    cdef int64_t phys, store_ts
    cdef int32_t crc
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if o < 0 or limit > view.len:
            raise ValueError("locate: bounds outside the buffer")
        b = <const unsigned char*>view.buf
        try:
            locate_c(b, o, limit, &r)
        except _MessageDecodeError as exc:
            return exc.reason
        phys = rd64(b + o + P_PHYSICALOFFSET)
        if phys != pos:
            return f"PHYSICALOFFSET field {phys} is not the record's position"
        crc = rd32(b + o + P_BODYCRC)
        if <int32_t>body_crc(b + r.body_at, r.body_len) != crc:
            return "body CRC mismatch"
        store_ts = rd64(b + o + P_STORETIMESTAMP_V4 + (V6_EXTRA if r.sys_flag & F_BORN_V6 else 0))
        topic = utf8(b + r.topic_at, r.props_at - 2 - r.topic_at)
        tags, keys, uniq, delay = scan_props(b + r.props_at, o + r.total - r.props_at)
        fields = (pos, r.total, topic, rd32(b + o + P_QUEUEID), rd64(b + o + P_QUEUEOFFSET),
                  store_ts, tags, keys, uniq, delay)
    finally:
        PyBuffer_Release(&view)
    return _new_tuple(info_type, fields)


def decode_records(buf, *, broker="", bint decompress=True):
    cdef Py_buffer view
    cdef Py_ssize_t pos = 0, n, total
    cdef list out = []
    cdef list cache = [None, None]
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        n = view.len
        while pos < n:
            if n - pos < 8:
                raise _MessageDecodeError(pos, "trailing bytes after the last record")
            PyList_Append(out, decode_one(buf, <const unsigned char*>view.buf, n, pos, broker,
                                          decompress, False, cache, &total))
            pos += total
    finally:
        PyBuffer_Release(&view)
    return out


cdef object unsound_c(const unsigned char* b, Py_ssize_t n, Py_ssize_t o, int64_t pos,
                      Py_ssize_t size, int64_t queue_id, const unsigned char* topic,
                      Py_ssize_t topic_len, bint crc):
    cdef Located r
    cdef int64_t phys
    cdef int32_t total, qid
    # `o > n - size`, not `o + size > n`: an offset and a size near 2**63 (any int64 the
    # caller passes) overflow the sum, which then passes and the record is read out of bounds.
    if size < MIN_RECORD or o < 0 or o > n - size:
        return "record cut short"
    total = rd32(b + o)
    if total != size:
        return f"TOTALSIZE {total} differs from the consume queue's {size}"
    try:
        locate_c(b, o, o + size, &r)
    except _MessageDecodeError as exc:
        return exc.reason
    phys = rd64(b + o + P_PHYSICALOFFSET)
    if phys != pos:
        return f"PHYSICALOFFSET field {phys} is not the record's position"
    qid = rd32(b + o + P_QUEUEID)
    if queue_id >= 0 and qid != queue_id:
        return f"QUEUEID {qid} is not the consume queue's {queue_id}"
    if topic_len and (b[r.topic_at - 1] != topic_len
                      or memcmp(b + r.topic_at, topic, topic_len) != 0):
        return "the topic is not the consume queue's"
    if crc and <int32_t>body_crc(b + r.body_at, r.body_len) != rd32(b + o + P_BODYCRC):
        return "body CRC mismatch"
    return None


cdef Py_ssize_t topic_length(bytes topic) except -1:
    # A topic longer than its one length byte can say never matches a record: refused here
    # rather than compared against a truncated length.
    if len(topic) > 255:
        raise ValueError(f"a topic of {len(topic)} bytes cannot be a record's")
    return len(topic)


def record_unsound(buf, Py_ssize_t o, int64_t pos, Py_ssize_t size, int64_t queue_id=-1,
                   bytes topic=b"", bint crc=True):
    cdef Py_buffer view
    cdef Py_ssize_t topic_len = topic_length(topic)
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return unsound_c(<const unsigned char*>view.buf, view.len, o, pos, size, queue_id,
                         <const unsigned char*>PyBytes_AS_STRING(topic), topic_len, crc)
    finally:
        PyBuffer_Release(&view)


cdef bint entry_unsound(const unsigned char* b, Py_ssize_t n, Py_ssize_t o, int64_t phys,
                        int64_t size, int64_t queue_id, const unsigned char* t,
                        Py_ssize_t topic_len, int64_t lo, int64_t hi) except -1:
    # One entry of a pull's run: no positive size, or its record unsound (in full in [lo, hi)).
    return size <= 0 or unsound_c(b, n, o, phys, size, queue_id, t, topic_len,
                                  lo <= phys < hi) is not None


def first_unsound(buf, picked, int64_t lo, int64_t hi, int64_t queue_id=-1, bytes topic=b""):
    cdef Py_buffer view
    cdef Py_ssize_t o = 0, i = 0
    cdef Py_ssize_t topic_len = topic_length(topic)
    cdef int64_t phys, size
    cdef const unsigned char* b
    cdef const unsigned char* t = <const unsigned char*>PyBytes_AS_STRING(topic)
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const unsigned char*>view.buf
        for _qo, phys, size in picked:
            if entry_unsound(b, view.len, o, phys, size, queue_id, t, topic_len, lo, hi):
                return i
            o += size
            i += 1
    finally:
        PyBuffer_Release(&view)
    return -1


def first_unsound_entries(buf, entries, Py_ssize_t count, int64_t lo, int64_t hi,
                          int64_t queue_id=-1, bytes topic=b""):
    cdef Py_buffer view
    cdef Py_buffer ev
    cdef Py_ssize_t o = 0, i
    cdef Py_ssize_t topic_len = topic_length(topic)
    cdef int64_t phys, size
    cdef const unsigned char* b
    cdef const unsigned char* e
    cdef const unsigned char* t = <const unsigned char*>PyBytes_AS_STRING(topic)
    PyObject_GetBuffer(entries, &ev, PyBUF_SIMPLE)
    try:
        if count < 0 or count > ev.len // CQ_SIZE:
            raise ValueError(f"first_unsound_entries: {count} entries are not in {ev.len} bytes")
        e = <const unsigned char*>ev.buf
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            b = <const unsigned char*>view.buf
            for i in range(count):
                phys = rd64(e + i * CQ_SIZE)
                size = rd32(e + i * CQ_SIZE + 8)
                if entry_unsound(b, view.len, o, phys, size, queue_id, t, topic_len, lo, hi):
                    return i
                o += size
        finally:
            PyBuffer_Release(&view)
    finally:
        PyBuffer_Release(&ev)
    return -1


def record_starts(buf):
    cdef Py_buffer view
    cdef Py_ssize_t pos = 0, n, count = 0, cap
    cdef int32_t size
    cdef const unsigned char* p
    cdef bytearray out
    cdef int32_t* dst
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char*>view.buf
        n = view.len
        if n > 0x7FFFFFFF:
            raise _MessageDecodeError(0, "a run of records over 2 GiB")
        # At most one record per MIN_RECORD bytes: one allocation, trimmed at the end.
        cap = n // MIN_RECORD + 1
        out = bytearray(cap * 4)
        dst = <int32_t*>PyByteArray_AS_STRING(out)
        while pos <= n - MIN_RECORD:
            dst[count] = <int32_t>pos
            count += 1
            size = <int32_t>rd32(p + pos)
            if size < MIN_RECORD:
                raise _MessageDecodeError(pos, f"total size {size} is below the minimum")
            pos += size
        if pos != n:
            raise _MessageDecodeError(pos, "the last record does not end where the buffer ends")
    finally:
        PyBuffer_Release(&view)
    return PyBytes_FromStringAndSize(PyByteArray_AS_STRING(out), count * 4)


cdef Py_ssize_t write_record(unsigned char* o, const unsigned char* topic, Py_ssize_t topic_len,
                             int64_t queue_id, int64_t flag, const unsigned char* body,
                             Py_ssize_t body_len, const unsigned char* props, Py_ssize_t props_len,
                             int64_t sys_flag, int64_t born_ts, const unsigned char* born,
                             Py_ssize_t born_len, int64_t store_ts, const unsigned char* store,
                             Py_ssize_t store_len, int64_t reconsume, int64_t prepared,
                             int64_t queue_offset, int64_t phys, int64_t crc) noexcept nogil:
    """One record at `o`; returns its size. Sizes are checked by the callers."""
    cdef unsigned char* p = o
    sys_flag &= ~(F_BORN_V6 | F_STORE_V6)
    if born_len == HOST_V6:
        sys_flag |= F_BORN_V6
    if store_len == HOST_V6:
        sys_flag |= F_STORE_V6
    cdef Py_ssize_t total = (MIN_RECORD + body_len + topic_len + props_len
                             + (V6_EXTRA if born_len == HOST_V6 else 0)
                             + (V6_EXTRA if store_len == HOST_V6 else 0))
    wr32(p, total)
    wr32(p + 4, MAGIC)
    wr32(p + 8, crc)
    wr32(p + 12, queue_id)
    wr32(p + 16, flag)
    wr64(p + 20, queue_offset)
    wr64(p + 28, phys)
    wr32(p + 36, sys_flag)
    wr64(p + 40, born_ts)
    p += 48
    memcpy(p, born, born_len)
    p += born_len
    wr64(p, store_ts)
    p += 8
    memcpy(p, store, store_len)
    p += store_len
    wr32(p, reconsume)
    wr64(p + 4, prepared)
    wr32(p + 12, body_len)
    p += 16
    memcpy(p, body, body_len)
    p += body_len
    p[0] = <unsigned char>topic_len
    memcpy(p + 1, topic, topic_len)
    p += 1 + topic_len
    wr16(p, props_len)
    memcpy(p + 2, props, props_len)
    return total


def encode_record(*, bytes topic, int64_t queue_id, int64_t flag, body, bytes properties,
                  int64_t sys_flag, int64_t born_timestamp, bytes born_host, int64_t store_timestamp,
                  bytes store_host, int64_t reconsume_times=0, int64_t prepared_transaction_offset=0,
                  int64_t queue_offset=0, int64_t physical_offset=0, crc=None):
    cdef Py_buffer bv
    cdef Py_ssize_t size
    if len(topic) > MAX_TOPIC:
        raise ValueError(f"topic is {len(topic)} bytes; at most {MAX_TOPIC}")
    if len(properties) > MAX_PROPS:
        raise ValueError(f"properties are {len(properties)} bytes; at most {MAX_PROPS}")
    PyObject_GetBuffer(body, &bv, PyBUF_SIMPLE)
    try:
        c = body_crc(<const unsigned char*>bv.buf, bv.len) if crc is None else crc
        size = (MIN_RECORD + bv.len + len(topic) + len(properties)
                + (V6_EXTRA if len(born_host) == HOST_V6 else 0)
                + (V6_EXTRA if len(store_host) == HOST_V6 else 0))
        out = PyBytes_FromStringAndSize(NULL, size)
        write_record(<unsigned char*>PyBytes_AS_STRING(out), topic, len(topic), queue_id, flag,
                     <const unsigned char*>bv.buf, bv.len, properties, len(properties), sys_flag,
                     born_timestamp, born_host, len(born_host), store_timestamp, store_host,
                     len(store_host), reconsume_times, prepared_transaction_offset, queue_offset,
                     physical_offset, c)
    finally:
        PyBuffer_Release(&bv)
    return out


# --- SEND_BATCH_MESSAGE bodies ---------------------------------------------------------------------
def encode_batch(items):
    cdef list props = []
    cdef list bodies = []
    cdef list flags = []
    cdef Py_ssize_t total = 0, i, n
    cdef bytes pr
    cdef bytes body
    for item in items:
        pr = encode_props(item.properties)
        body = item.body
        PyList_Append(props, pr)
        PyList_Append(bodies, body)
        PyList_Append(flags, item.flag)
        total += BATCH_MIN + len(body) + len(pr)
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef unsigned char* o = <unsigned char*>PyBytes_AS_STRING(out)
    n = len(props)
    for i in range(n):
        pr = <bytes>props[i]
        body = <bytes>bodies[i]
        wr32(o, BATCH_MIN + len(body) + len(pr))
        wr32(o + 4, 0)
        wr32(o + 8, 0)
        wr32(o + 12, <int64_t>flags[i])
        wr32(o + 16, len(body))
        o += BATCH_HEAD_SIZE
        memcpy(o, <const char*>body, len(body))
        o += len(body)
        wr16(o, len(pr))
        memcpy(o + 2, <const char*>pr, len(pr))
        o += 2 + len(pr)
    return out


cdef Py_ssize_t batch_entry(const unsigned char* b, Py_ssize_t pos, Py_ssize_t n,
                            int32_t* total, int32_t* flag, int32_t* body_len,
                            int16_t* props_len) except -1:
    """Checks the SEND_BATCH entry at `pos` and returns where its properties start."""
    cdef Py_ssize_t p
    if n - pos < BATCH_MIN:
        raise _MessageDecodeError(pos, "truncated batch entry")
    total[0] = rd32(b + pos)
    flag[0] = rd32(b + pos + 12)
    body_len[0] = rd32(b + pos + 16)
    if total[0] < BATCH_MIN or pos + total[0] > n or body_len[0] < 0:
        raise _MessageDecodeError(pos, f"batch entry size {total[0]} does not fit")
    p = pos + BATCH_HEAD_SIZE
    if p + body_len[0] + 2 > pos + total[0]:
        raise _MessageDecodeError(pos, "batch entry body overruns the entry")
    p += body_len[0]
    props_len[0] = rd16(b + p)
    p += 2
    if props_len[0] < 0 or p + props_len[0] != pos + total[0]:
        raise _MessageDecodeError(pos, "batch entry properties do not end with the entry")
    return p


def split_batch(buf):
    cdef Py_buffer view
    cdef list out = []
    cdef Py_ssize_t pos = 0, n, p
    cdef int32_t total, body_len, flag
    cdef int16_t props_len
    cdef const unsigned char* b
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const unsigned char*>view.buf
        n = view.len
        while pos < n:
            p = batch_entry(b, pos, n, &total, &flag, &body_len, &props_len)
            body = PyBytes_FromStringAndSize(<const char*>b + p - 2 - body_len, body_len)
            PyList_Append(out, (flag, body,
                                PyBytes_FromStringAndSize(<const char*>b + p, props_len)))
            pos += total
    finally:
        PyBuffer_Release(&view)
    return out


cdef bint has_name(const unsigned char* p, Py_ssize_t n, const char* name, Py_ssize_t k,
                   bint whole=True) noexcept:
    """Whether `name` starts an item (at 0 or after \\x02) and is followed by \\x01 (not
    `whole`: whether an item's name starts with `name`)."""
    cdef Py_ssize_t i = 0
    cdef const unsigned char* hit
    while i + k < n or (not whole and i + k == n):
        if memcmp(p + i, name, k) == 0 and (not whole or p[i + k] == NV):
            return True
        hit = <const unsigned char*>memchr(p + i, PS, n - i)
        if hit == NULL:
            return False
        i = hit - p + 1
    return False


cdef inline int entry_marks(const unsigned char* p, Py_ssize_t n) noexcept:
    """An entry's MARK_* bits, and MARK_DELAY when it asks for a delay level."""
    cdef int marks = 0
    if has_name(p, n, "DELAY", 5):
        marks |= MARK_DELAY
    if has_name(p, n, "TRAN_MSG", 8):
        marks |= MARK_TRANSACTION
    if has_name(p, n, "TIMER_", 6, False):
        marks |= MARK_TIMER
    return marks


def check_batch(buf):
    cdef Py_buffer view
    cdef Py_ssize_t pos = 0, n, p, count = 0
    cdef int32_t total, body_len, flag
    cdef int16_t props_len
    cdef const unsigned char* b
    cdef int marks = 0
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const unsigned char*>view.buf
        n = view.len
        while pos < n:
            p = batch_entry(b, pos, n, &total, &flag, &body_len, &props_len)
            marks |= entry_marks(b + p, props_len)
            count += 1
            pos += total
    finally:
        PyBuffer_Release(&view)
    if marks & MARK_DELAY:
        raise _RecordEncodeError("MESSAGE_ILLEGAL", "a batch cannot carry delayed messages")
    return count, marks


def batch_to_messages(buf, message_type, str topic, int64_t queue_id, int64_t sys_flag,
                      int64_t born_timestamp, born_host, int64_t reconsume_times, str name,
                      str value):
    cdef Py_buffer view
    cdef list out = []
    cdef Py_ssize_t pos = 0, n, p, plen, klen
    cdef int32_t total, body_len, flag
    cdef int16_t props_len
    cdef const unsigned char* b
    cdef int marks = 0
    cdef bytes suffix = encode_props({name: value})
    cdef bytes key = name.encode()
    cdef const char* kp = key
    klen = len(key)
    new = message_type.__new__
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const unsigned char*>view.buf
        n = view.len
        while pos < n:
            p = batch_entry(b, pos, n, &total, &flag, &body_len, &props_len)
            body = PyBytes_FromStringAndSize(<const char*>b + p - 2 - body_len, body_len)
            marks |= entry_marks(b + p, props_len)
            if has_name(b + p, props_len, kp, klen):
                props = _with_property(PyBytes_FromStringAndSize(<const char*>b + p, props_len),
                                       name, value)
            else:
                plen = props_len + (1 if props_len and b[p + props_len - 1] != PS else 0)
                props = PyBytes_FromStringAndSize(NULL, plen + len(suffix))
                memcpy(PyBytes_AS_STRING(props), b + p, props_len)
                if plen != props_len:
                    PyBytes_AS_STRING(props)[props_len] = PS
                memcpy(PyBytes_AS_STRING(props) + plen, <const char*>suffix, len(suffix))
            m = new(message_type)
            m.topic = topic
            m.queue_id = queue_id
            m.body = body
            m.properties = props
            m.flag = flag
            m.sys_flag = sys_flag
            m.born_timestamp = born_timestamp
            m.born_host = born_host
            m.reconsume_times = reconsume_times
            m.prepared_transaction_offset = 0
            PyList_Append(out, m)
            pos += total
    finally:
        PyBuffer_Release(&view)
    if marks & MARK_DELAY:
        raise _RecordEncodeError("MESSAGE_ILLEGAL", "a batch cannot carry delayed messages")
    return out, marks


# --- key-index entries: KEY_ENTRY records (native int64 hash, offset, time) ---------------------------
cdef inline unsigned long topic_prefix_crc(const char* topic, Py_ssize_t n) noexcept:
    # The CRC of "topic#", from which every key of the topic continues.
    cdef unsigned long c = ferrymq_crc32(0, <const unsigned char*>topic, <size_t>n)
    return ferrymq_crc32(c, <const unsigned char*>b"#", 1)


cdef inline int add_key(bytearray out, unsigned long prefix, const char* key, Py_ssize_t n,
                        int64_t phys, int64_t ts) except -1:
    cdef int64_t e[3]
    cdef Py_ssize_t at = PyByteArray_GET_SIZE(out)
    e[0] = <int64_t>(ferrymq_crc32(prefix, <const unsigned char*>key, <size_t>n) & 0x7FFFFFFF)
    e[1] = phys
    e[2] = ts
    PyByteArray_Resize(out, at + 24)
    memcpy(PyByteArray_AS_STRING(out) + at, e, 24)
    return 0


cdef inline Py_ssize_t add_keys(bytearray out, unsigned long prefix, object keys, object uniq,
                                int64_t phys, int64_t ts) except -1:
    """A record's entries: its KEYS split on spaces (empty pieces skipped), then UNIQ_KEY."""
    cdef Py_ssize_t n = 0, kn, start, i
    cdef const char* kp
    cdef const char* hit
    if keys:
        kp = PyUnicode_AsUTF8AndSize(keys, &kn)
        start = 0
        while start <= kn:
            hit = <const char*>memchr(kp + start, 32, kn - start)
            i = (hit - kp) if hit != NULL else kn
            if i > start:
                add_key(out, prefix, kp + start, i - start, phys, ts)
                n += 1
            start = i + 1
    if uniq:
        kp = PyUnicode_AsUTF8AndSize(uniq, &kn)
        add_key(out, prefix, kp, kn, phys, ts)
        n += 1
    return n


def key_entries(bytearray out, str topic, keys, uniq, int64_t phys, int64_t ts):
    cdef Py_ssize_t tn
    cdef const char* tp = PyUnicode_AsUTF8AndSize(topic, &tn)
    return add_keys(out, topic_prefix_crc(tp, tn), keys, uniq, phys, ts)


# --- the store's batch: encode once, patch the position in -----------------------------------------
cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
    int T_OBJECT_EX

cdef extern from "Python.h":
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member

_MemberDescriptor = type(StoredMessage.__dict__["_buf"])
# The StoreMessage fields encode_messages reads, in this order (F_* below).
_FIELDS = ("topic", "queue_id", "body", "properties", "flag", "sys_flag", "born_timestamp",
           "born_host", "reconsume_times", "prepared_transaction_offset")
cdef enum:
    F_TOPIC, F_QUEUE_ID, F_BODY, F_PROPERTIES, F_FLAG, F_SYS_FLAG, F_BORN_TIMESTAMP, F_BORN_HOST,
    F_RECONSUME, F_PREPARED, N_FIELDS
cdef object slots_type = None  # the last type whose fields are all slots
cdef object plain_type = None  # the last type whose fields are not
cdef Py_ssize_t slots_at[N_FIELDS]


cdef bint learn_slots(object tp) except -1:
    """Whether every field of `tp` is a __slots__ member (StoreMessage is a slots dataclass):
    then encode_messages reads them where the member descriptors themselves read them, at
    their offsets in the instance, instead of ten attribute lookups per message."""
    global slots_type, plain_type
    cdef Py_ssize_t at[N_FIELDS]
    for j in range(N_FIELDS):
        d = getattr(tp, _FIELDS[j], None)
        if (type(d) is not _MemberDescriptor
                or (<PyMemberDescrObject*>d).d_member.type != T_OBJECT_EX):
            plain_type = tp
            return False
        at[j] = (<PyMemberDescrObject*>d).d_member.offset
    for j in range(N_FIELDS):
        slots_at[j] = at[j]
    slots_type = tp
    return True


cdef inline object field(object m, int j, bint fast):
    cdef PyObject* v
    if fast:
        v = (<PyObject**>((<char*><PyObject*>m) + slots_at[j]))[0]
        if v != NULL:
            return <object>v
    return getattr(m, _FIELDS[j])  # an unset slot raises AttributeError here, as usual


def encode_messages(msgs, bytes store_host, Py_ssize_t max_size, topic_bytes, born_bytes,
                    tag_code, schedule_topic):
    cdef Py_ssize_t n = len(msgs), i, total = 0, size
    cdef list praws = []
    cdef list traws = []
    cdef list borns = []
    cdef list sizes = []
    cdef list tags = []
    cdef bytearray keys = bytearray()
    cdef list delays = []
    cdef bytes praw
    cdef bytes traw
    cdef bytes born
    cdef Py_buffer bv
    cdef Py_ssize_t store_len = len(store_host)
    cdef bint store_v6 = store_len == HOST_V6
    cdef object last_topic = None, last_born = None, last_tags = None, key_topic = None
    cdef object tag = 0
    cdef unsigned long key_prefix = 0
    cdef bint fast
    traw = b""
    born = b""
    for i in range(n):
        m = msgs[i]
        fast = type(m) is slots_type or (type(m) is not plain_type and learn_slots(type(m)))
        props = field(m, F_PROPERTIES, fast)
        if type(props) is dict:
            try:
                praw = encode_props(<dict>props)
            except PropertyError:
                raise _RecordEncodeError(
                    "MESSAGE_ILLEGAL", "a property name or value contains \\x01 or \\x02") from None
            tags_text = (<dict>props).get(_TAGS)
            keys_text = (<dict>props).get(_KEYS)
            uniq = (<dict>props).get(_UNIQ)
            delay = (<dict>props).get(_DELAY)
        else:
            praw = props
            tags_text, keys_text, uniq, delay = scan_props(
                <const unsigned char*>PyBytes_AS_STRING(praw), len(praw))
        if len(praw) > MAX_PROPS:
            raise _RecordEncodeError("PROPERTIES_SIZE_EXCEEDED",
                                     f"properties are {len(praw)} bytes; at most {MAX_PROPS}")
        topic = field(m, F_TOPIC, fast)
        if topic != last_topic:
            traw = topic_bytes(topic)
            last_topic = topic
        born_host = field(m, F_BORN_HOST, fast)
        if born_host != last_born:
            born = born_bytes(born_host)
            last_born = born_host
        body = field(m, F_BODY, fast)
        size = MIN_RECORD + len(body) + len(traw) + len(praw)
        if len(born) != HOST_V4:
            size += V6_EXTRA
        if store_v6:
            size += V6_EXTRA
        if size > max_size:
            raise _RecordEncodeError("MESSAGE_ILLEGAL",
                                     f"message of {size} bytes exceeds max_message_size {max_size}")
        PyList_Append(praws, praw)
        PyList_Append(traws, traw)
        PyList_Append(borns, born)
        PyList_Append(sizes, size)
        if tags_text != last_tags:
            tag = tag_code(tags_text) if tags_text else 0
            last_tags = tags_text
        PyList_Append(tags, tag)
        if uniq or keys_text:
            if topic is not key_topic:
                key_prefix = topic_prefix_crc(PyBytes_AS_STRING(traw), len(traw))
                key_topic = topic
            add_keys(keys, key_prefix, keys_text, uniq, total, 0)
        if topic == schedule_topic:
            PyList_Append(delays, (i, delay))
        total += size
    out = bytearray(total)
    cdef unsigned char* o = <unsigned char*>PyByteArray_AS_STRING(out)
    for i in range(n):
        m = msgs[i]
        fast = type(m) is slots_type
        praw = <bytes>praws[i]
        traw = <bytes>traws[i]
        born = <bytes>borns[i]
        PyObject_GetBuffer(field(m, F_BODY, fast), &bv, PyBUF_SIMPLE)
        try:
            o += write_record(o, traw, len(traw), field(m, F_QUEUE_ID, fast),
                              field(m, F_FLAG, fast), <const unsigned char*>bv.buf, bv.len,
                              praw, len(praw), field(m, F_SYS_FLAG, fast),
                              field(m, F_BORN_TIMESTAMP, fast), born, len(born), 0, store_host,
                              store_len, field(m, F_RECONSUME, fast),
                              field(m, F_PREPARED, fast), 0, 0,
                              body_crc(<const unsigned char*>bv.buf, bv.len))
        finally:
            PyBuffer_Release(&bv)
    return out, sizes, tags, keys, delays


cdef char* HEX = b"0123456789ABCDEF"


cdef inline void set_item(object t, Py_ssize_t j, object v) noexcept:
    Py_INCREF(v)  # PyTuple_SET_ITEM steals a reference
    PyTuple_SET_ITEM(t, j, v)


cdef object new_appended(PyTypeObject* tp, int64_t phys, int64_t size, int64_t qo, object ts,
                         object msg_id):
    # tuple.__new__(tp, (...)) without the intermediate tuple: what tuple's own subtype
    # constructor does (allocate the subtype with room for the items, then fill them).
    cdef PyObject* raw = (<TypeWithAlloc*>tp).tp_alloc(tp, 5)
    if raw == NULL:
        raise MemoryError()
    t = <object>raw
    Py_DECREF(t)  # the cast above took a second reference
    set_item(t, 0, phys)
    set_item(t, 1, size)
    set_item(t, 2, qo)
    set_item(t, 3, ts)
    set_item(t, 4, msg_id)
    return t


def place_messages(bytearray data, msgs, sizes, tags, int64_t pos, int64_t store_ts,
                   next_offset, str msg_id_prefix, appended_type):
    cdef dict entries = {}
    cdef dict counters = {}
    cdef list appended = []
    cdef unsigned char* d = <unsigned char*>PyByteArray_AS_STRING(data)
    cdef Py_ssize_t o = 0, n = len(msgs), i, at, j, plen, total = 0
    cdef int64_t phys = pos, qo = 0, size, tag
    cdef uint64_t u
    cdef unsigned char* e = NULL
    cdef Py_ssize_t e_at = 0
    cdef bytearray entry = None
    cdef object last_topic = None, last_qid = None
    cdef object ts_obj = store_ts
    cdef PyTypeObject* tp
    cdef Py_UCS1* idp
    if not isinstance(appended_type, type) or not issubclass(appended_type, tuple):
        raise TypeError("place_messages: appended_type must be a tuple subclass")
    tp = <PyTypeObject*>appended_type
    if len(sizes) != n or len(tags) != n:
        raise ValueError("place_messages: sizes and tags must match the messages")
    for i in range(n):
        size = sizes[i]
        if size < 0:
            raise ValueError("place_messages: sizes overrun the data")
        total += size
    if total > PyByteArray_GET_SIZE(data):
        raise ValueError("place_messages: sizes overrun the data")
    plen = len(msg_id_prefix)
    cdef bint ascii_prefix = PyUnicode_MAX_CHAR_VALUE(msg_id_prefix) <= 127
    cdef char hexbuf[16]
    for i in range(n):
        m = msgs[i]
        size = sizes[i]
        tag = tags[i]
        topic = m.topic
        qid = m.queue_id
        # A batch is one queue but for the timer's deliveries: look the queue up only when it
        # changes, and write its entries into one buffer sized for the whole batch.
        if entry is None or topic is not last_topic or qid is not last_qid:
            if entry is not None:
                PyDict_SetItem(counters, (last_topic, last_qid), qo)
                PyByteArray_Resize(entry, e_at)
            q = (topic, qid)
            found = PyDict_GetItem(counters, q)
            if found == NULL:
                qo = next_offset(q)
                entry = bytearray(n * CQ_SIZE)
                PyDict_SetItem(entries, q, entry)
                e_at = 0
            else:
                qo = <object>found
                entry = <bytearray>entries[q]
                e_at = PyByteArray_GET_SIZE(entry)
                PyByteArray_Resize(entry, e_at + (n - i) * CQ_SIZE)
            last_topic = topic
            last_qid = qid
        wr64(d + o + P_QUEUEOFFSET, qo)
        wr64(d + o + P_PHYSICALOFFSET, phys)
        at = o + P_STORETIMESTAMP_V4 + (V6_EXTRA if d[o + P_SYSFLAG + 3] & F_BORN_V6 else 0)
        wr64(d + at, store_ts)
        e = <unsigned char*>PyByteArray_AS_STRING(entry) + e_at
        wr64(e, phys)
        wr32(e + 8, size)
        wr64(e + 12, tag)
        e_at += CQ_SIZE
        u = <uint64_t>phys
        for j in range(16):
            hexbuf[15 - j] = HEX[u & 0xF]
            u >>= 4
        if ascii_prefix:  # the store's is hex: one string built in place
            msg_id = PyUnicode_New(plen + 16, 127)
            idp = PyUnicode_1BYTE_DATA(msg_id)
            memcpy(idp, PyUnicode_1BYTE_DATA(msg_id_prefix), plen)
            memcpy(idp + plen, hexbuf, 16)
        else:
            msg_id = msg_id_prefix + PyUnicode_FromStringAndSize(hexbuf, 16)
        PyList_Append(appended, new_appended(tp, phys, size, qo, ts_obj, msg_id))
        qo += 1
        o += size
        phys += size
    if entry is not None:
        PyDict_SetItem(counters, (last_topic, last_qid), qo)
        PyByteArray_Resize(entry, e_at)
    return entries, appended
