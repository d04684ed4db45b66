# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The send-batch core, compiled: the same classes and function as _py.py, whose docstrings
say what they do. What differs is how: a batch's body grows in one C buffer, the common
message is checked, given its id and encoded in one call, and a batch's results are made and
handed to the waiting futures in one loop."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_SetItem, PyDict_Size
from cpython.object cimport PyObject
from libc.stdint cimport int64_t, uint32_t
from libc.stdlib cimport free, realloc
from libc.string cimport memchr, memcpy
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

from ...common._endian cimport wr16, wr32

import _thread
from concurrent.futures._base import FINISHED, RUNNING

from ...common import props as P
from ...common.record.layout import BATCH_HEAD, BATCH_MIN_ENTRY, MAX_PROPERTIES_BYTES
from ..futures import SendFuture
from ..outgoing import FLAG_MAX, FLAG_MIN, UNIQ_PROPERTY_BYTES
from . import _py
from ..results import SendResult

cdef extern from "Python.h":
    ctypedef void* PyThread_type_lock
    PyThread_type_lock PyThread_allocate_lock()
    void PyThread_free_lock(PyThread_type_lock)
    int PyThread_acquire_lock(PyThread_type_lock, int) nogil
    void PyThread_release_lock(PyThread_type_lock) nogil
    int PyObject_GenericSetAttr(object o, object name, object value) except -1
    object PyUnicode_New(Py_ssize_t size, unsigned int maxchar)
    void* PyUnicode_DATA(object o)
    bint PyUnicode_IS_COMPACT_ASCII(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    object PyIter_Next(object o)
    const char* PyUnicode_AsUTF8AndSize(object o, Py_ssize_t* size)
    void PyErr_Clear()
    bint PyDict_Next(object d, Py_ssize_t* pos, PyObject** key, PyObject** value)
    dict PyDict_Copy(object d)
    int PyObject_GenericSetDict(object o, object value, void* context) except -1

IMPLEMENTATION = "cython"
MAX_TOPICS = _py.MAX_TOPICS
cdef frozenset RESERVED = _py.RESERVED
cdef Py_ssize_t UNIQ_BYTES = UNIQ_PROPERTY_BYTES
cdef Py_ssize_t MAX_PROPS = MAX_PROPERTIES_BYTES
cdef int64_t MIN_FLAG = FLAG_MIN, MAX_FLAG = FLAG_MAX
cdef unsigned char NV = ord(P.NAME_VALUE_SEPARATOR)
cdef unsigned char PS = ord(P.PROPERTY_SEPARATOR)

cdef Py_ssize_t HEAD = BATCH_HEAD.size
cdef Py_ssize_t MIN_ENTRY = BATCH_MIN_ENTRY
cdef str UNIQ = P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
cdef bytes UNIQ_PREFIX = (UNIQ + P.NAME_VALUE_SEPARATOR).encode()
cdef bytes UNIQ_END = P.PROPERTY_SEPARATOR.encode()
cdef object _RUNNING = RUNNING
cdef object _FINISHED = FINISHED
cdef object _SendFuture = SendFuture
cdef object _SendResult = SendResult
cdef object _new = object.__new__
cdef str _F_STATUS = "status", _F_MSG_ID = "msg_id", _F_OFFSET_ID = "offset_msg_id"
cdef str _F_QUEUE_ID = "queue_id", _F_QUEUE_OFFSET = "queue_offset", _F_BROKER = "broker"
cdef str _K_COND = "_cond", _K_WAITERS = "_waiter_list", _K_CALLBACKS = "_done_callbacks"
cdef str _K_STATE = "_state", _K_LOCK = "_lock", _K_RESULT = "_result"
cdef const char* HEX = b"0123456789ABCDEF"

# A SendFuture made without its __init__ (two Python calls): its fields as that sets them, and
# a lock of its own. Checked against a real one so a change to LightFuture's fields fails here.
cdef dict _FUTURE_FIELDS = dict(SendFuture().__dict__)
del _FUTURE_FIELDS["_lock"]
cdef object _allocate_lock = _thread.allocate_lock
if sorted(_FUTURE_FIELDS) != ["_cond", "_done_callbacks", "_exception", "_result", "_state",
                             "_waiter_list"] or _FUTURE_FIELDS["_state"] is not RUNNING:
    raise ImportError("LightFuture's fields changed: update _cbatch")


cdef object _send_future():
    f = _new(_SendFuture)
    cdef dict d = PyDict_Copy(_FUTURE_FIELDS)
    PyDict_SetItem(d, _K_LOCK, _allocate_lock())
    PyObject_GenericSetDict(f, d, NULL)
    return f


if [f for f in SendResult.__dataclass_fields__] != [
        _F_STATUS, _F_MSG_ID, _F_OFFSET_ID, _F_QUEUE_ID, _F_QUEUE_OFFSET, _F_BROKER]:
    raise ImportError("SendResult's fields changed: update _cbatch")


cdef class EntryBatch:
    cdef readonly object topic
    cdef readonly list ids, waiters, paths
    cdef readonly Py_ssize_t size
    cdef unsigned char* _buf
    cdef Py_ssize_t _used, _cap

    def __cinit__(self, topic):
        self.topic = topic
        self.ids = []
        self.waiters = []
        self.paths = []

    def __dealloc__(self):
        free(self._buf)

    cdef unsigned char* _room(self, Py_ssize_t n) except NULL:
        cdef Py_ssize_t want = self._used + n, cap = self._cap
        cdef unsigned char* grown
        if want > cap:
            cap = max(want, cap * 2, 4096)
            grown = <unsigned char*>realloc(self._buf, cap)
            if grown == NULL:
                raise MemoryError()
            self._buf = grown
            self._cap = cap
        grown = self._buf + self._used
        self._used = want
        return grown

    cdef int _entry(self, const unsigned char* body, Py_ssize_t blen, int64_t flag,
                    const unsigned char* props, Py_ssize_t plen, object uniq, object waiter,
                    object path) except -1:
        if not MIN_FLAG <= flag <= MAX_FLAG:
            raise ValueError(f"flag {flag} does not fit the wire's 32 bits")
        if plen > MAX_PROPS:
            raise ValueError(f"the properties encode to {plen} bytes; at most 32767 fit")
        cdef unsigned char* p = self._room(MIN_ENTRY + blen + plen)
        wr32(p, MIN_ENTRY + blen + plen)
        wr32(p + 4, 0)
        wr32(p + 8, 0)
        wr32(p + 12, flag)
        wr32(p + 16, blen)
        memcpy(p + HEAD, body, blen)
        p += HEAD + blen
        wr16(p, plen)
        if plen:
            memcpy(p + 2, props, plen)
        self.ids.append(uniq)
        self.waiters.append(waiter)
        self.paths.append(path)
        self.size += blen
        return 0

    def add(self, body, int64_t flag, props, uniq, waiter, path=None):
        cdef bytes b = _exact_bytes(body), p = _exact_bytes(props)
        self._entry(<const unsigned char*>PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b), flag,
                    <const unsigned char*>PyBytes_AS_STRING(p), PyBytes_GET_SIZE(p),
                    uniq, waiter, path)

    def __len__(self):
        return len(self.ids)

    def body(self):
        return PyBytes_FromStringAndSize(<char*>self._buf, self._used)

    def settle(self, result):
        cdef list offset_ids = result.offset_msg_id.split(",")
        cdef Py_ssize_t i, n = len(self.ids)
        cdef int64_t base = result.queue_offset
        status, queue_id, broker = result.status, result.queue_id, result.broker
        for i in range(n):
            r = _new(_SendResult)
            PyObject_GenericSetAttr(r, _F_STATUS, status)
            PyObject_GenericSetAttr(r, _F_MSG_ID, self.ids[i])
            PyObject_GenericSetAttr(r, _F_OFFSET_ID, offset_ids[i] if i < len(offset_ids) else "")
            PyObject_GenericSetAttr(r, _F_QUEUE_ID, queue_id)
            PyObject_GenericSetAttr(r, _F_QUEUE_OFFSET, base + i if base >= 0 else -1)
            PyObject_GenericSetAttr(r, _F_BROKER, broker)
            waiter = self.waiters[i]
            if type(waiter) is _SendFuture and _finish_quietly(waiter, r):
                continue
            if not waiter.done():
                waiter.set_result(r)


cdef bint _finish_quietly(object future, object result) except -1:
    """Settles a SendFuture nobody is waiting on, without its lock: what set_result does when
    no thread holds the future's lock and it has no condition, waiter or callback to tell,
    done in one step the interpreter lock makes atomic (no Python code runs in it). A waiter
    that comes later looks at the state under the lock and finds it finished."""
    cdef dict d = future.__dict__
    cdef PyObject* v = PyDict_GetItem(d, _K_STATE)
    if v == NULL or <object>v is not _RUNNING:
        return False
    v = PyDict_GetItem(d, _K_COND)
    if v != NULL and <object>v is not None:
        return False
    v = PyDict_GetItem(d, _K_WAITERS)
    if v != NULL and <object>v:
        return False
    v = PyDict_GetItem(d, _K_CALLBACKS)
    if v != NULL and <object>v:
        return False
    v = PyDict_GetItem(d, _K_LOCK)
    if v == NULL or (<object>v).locked():
        return False
    PyDict_SetItem(d, _K_RESULT, result)
    PyDict_SetItem(d, _K_STATE, _FINISHED)
    return True


cdef class Lane:
    cdef object _wake, _ids, _counter, _closed
    cdef Py_ssize_t _max_bytes, _max_messages, _compress_over
    cdef PyThread_type_lock _lock
    cdef dict _open, _limits
    cdef list _full
    cdef bint _woken, _wake_when_full, _woken_full

    def __cinit__(self, wake, ids, *, Py_ssize_t max_bytes, Py_ssize_t max_messages,
                  Py_ssize_t compress_over=0, bint wake_when_full=False):
        self._compress_over = compress_over
        self._wake_when_full = wake_when_full
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError()
        self._wake = wake
        self._ids = ids
        self._counter = ids._counter
        self._max_bytes = max_bytes
        self._max_messages = max_messages
        self._open = {}
        self._limits = {}
        self._full = []
        self._closed = None

    def __dealloc__(self):
        if self._lock != NULL:
            PyThread_free_lock(self._lock)

    def learn(self, topic, Py_ssize_t limit):
        if len(self._limits) >= MAX_TOPICS:
            self._limits.clear()
        self._limits[topic] = limit

    cdef str _next_id(self):
        """UniqIdGenerator.next_id: its head for this millisecond, its counter."""
        cdef timespec ts
        clock_gettime(CLOCK_REALTIME, &ts)
        cdef int64_t now_ms = <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000
        head_ms, head = self._ids._head
        if head_ms != now_ms:
            head = self._ids._head_for(now_ms)
        cdef long count = PyIter_Next(self._counter)
        if not PyUnicode_IS_COMPACT_ASCII(head):
            return self._ids.next_id()
        cdef Py_ssize_t n = PyUnicode_GET_LENGTH(head)
        cdef str out = PyUnicode_New(n + 4, 127)
        cdef unsigned char* o = <unsigned char*>PyUnicode_DATA(out)
        memcpy(o, PyUnicode_DATA(head), n)
        o[n] = HEX[(count >> 12) & 15]
        o[n + 1] = HEX[(count >> 8) & 15]
        o[n + 2] = HEX[(count >> 4) & 15]
        o[n + 3] = HEX[count & 15]
        return out

    def submit(self, msg):
        props = msg.properties
        if type(props) is not dict:
            return None
        body = msg.body
        if type(body) is not bytes or PyBytes_GET_SIZE(body) == 0:
            return None
        if 0 < self._compress_over < PyBytes_GET_SIZE(body):
            return None
        topic = msg.topic
        cdef PyObject* limit = PyDict_GetItem(self._limits, topic) if type(topic) is str else NULL
        if limit == NULL:
            return None
        flag = msg.flag
        if type(flag) is not int or not MIN_FLAG <= flag <= MAX_FLAG:
            return None
        cdef Py_ssize_t extra_len = 0 if PyDict_Size(props) == 0 else _plain_length(props)
        if extra_len < 0 or PyBytes_GET_SIZE(body) + extra_len > <Py_ssize_t><object>limit:
            return None
        # Encoded before the id joins the caller's map (a map the check above has passed).
        text = _encode_plain(props, extra_len)
        if text is None:
            return None
        uniq = self._next_id()
        PyDict_SetItem(props, UNIQ, uniq)
        text = <bytes>text + UNIQ_PREFIX + (<str>uniq).encode("ascii") + UNIQ_END
        return self._put(topic, body, flag, text, uniq)

    def submit_entry(self, topic, body, int64_t flag, props, uniq):
        return self._put(topic, _exact_bytes(body), flag, _exact_bytes(props), uniq)

    cdef object _put(self, object topic, bytes body, int64_t flag, bytes props, object uniq):
        future = _send_future()
        cdef bint wake = False
        cdef EntryBatch batch
        cdef object closed
        _acquire(self._lock)
        try:
            closed = self._closed
            if closed is None:
                v = PyDict_GetItem(self._open, topic)
                if v == NULL:
                    batch = EntryBatch(topic)
                    self._open[topic] = batch
                else:
                    batch = <EntryBatch>v
                batch._entry(<const unsigned char*>PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body),
                             flag, <const unsigned char*>PyBytes_AS_STRING(props),
                             PyBytes_GET_SIZE(props), uniq, future, None)
                wake = not self._woken
                self._woken = True
                if batch.size >= self._max_bytes or len(batch.ids) >= self._max_messages:
                    del self._open[topic]
                    self._full.append(batch)
                    if self._wake_when_full and not self._woken_full:
                        self._woken_full = True
                        wake = True
        finally:
            PyThread_release_lock(self._lock)
        if closed is not None:
            raise closed()
        if wake:
            self._wake()
        return future

    def take(self, bint full_only=False):
        cdef list batches
        _acquire(self._lock)
        try:
            batches = self._full
            self._full = []
            self._woken_full = False
            if not full_only:
                batches.extend(self._open.values())
                self._open = {}
                self._woken = False
        finally:
            PyThread_release_lock(self._lock)
        return batches

    def close(self, error):
        _acquire(self._lock)
        try:
            self._closed = error
        finally:
            PyThread_release_lock(self._lock)


cdef Py_ssize_t _plain_length(dict props) except -2:
    """_py._plain_properties's check: the length `props` encode to, or -1 when a lane must
    leave the message to the long way."""
    cdef Py_ssize_t i = 0, total = 0, kn, vn
    cdef PyObject* k
    cdef PyObject* v
    cdef const char* kp
    cdef const char* vp
    while PyDict_Next(props, &i, &k, &v):
        if type(<object>k) is not str or type(<object>v) is not str or <object>k in RESERVED:
            return -1
        kp = PyUnicode_AsUTF8AndSize(<object>k, &kn)
        if kp == NULL:
            PyErr_Clear()  # not encodable (a lone surrogate): the long way says why
            return -1
        vp = PyUnicode_AsUTF8AndSize(<object>v, &vn)
        if vp == NULL:
            PyErr_Clear()
            return -1
        if memchr(kp, NV, kn) or memchr(kp, PS, kn) or memchr(vp, NV, vn) or memchr(vp, PS, vn):
            return -1
        total += kn + vn + 2
    if total + UNIQ_BYTES > MAX_PROPS:
        return -1
    return total


cdef object _encode_plain(dict props, Py_ssize_t total):
    """`props` as _plain_length measured them: name NV value PS, in the map's order. None if
    the map no longer fits that measure (another thread changed it in between)."""
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    cdef unsigned char* o = <unsigned char*>PyBytes_AS_STRING(out)
    cdef unsigned char* end = o + total
    cdef Py_ssize_t i = 0, kn, vn
    cdef PyObject* k
    cdef PyObject* v
    cdef const char* kp
    cdef const char* vp
    while PyDict_Next(props, &i, &k, &v):
        if type(<object>k) is not str or type(<object>v) is not str:
            return None
        kp = PyUnicode_AsUTF8AndSize(<object>k, &kn)
        vp = PyUnicode_AsUTF8AndSize(<object>v, &vn) if kp != NULL else NULL
        if vp == NULL:
            PyErr_Clear()
            return None
        if end - o < kn + vn + 2:
            return None
        memcpy(o, kp, kn)
        o[kn] = NV
        memcpy(o + kn + 1, vp, vn)
        o[kn + 1 + vn] = PS
        o += kn + vn + 2
    return out if o == end else None


cdef inline bytes _exact_bytes(object data):
    return data if type(data) is bytes else bytes(data)


cdef inline void _acquire(PyThread_type_lock lock):
    # Never wait for the lane's lock holding the interpreter lock: its holder may need that
    # to finish (an allocation under the lock can run the collector, and with it Python code).
    if not PyThread_acquire_lock(lock, 0):
        with nogil:
            PyThread_acquire_lock(lock, 1)
