# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled remoting header codec: the same four functions as _header_py.py.

The compiled functions handle the headers peers actually send (a flat JSON object whose
extFields hold strings, numbers and booleans; a well-formed binary header). Anything else —
escaped surrogates, nested or null values, duplicate keys, malformed or truncated input —
is handed to the pure-Python function, so results and errors are identical by construction
there; tests/remoting checks the two agree everywhere else."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_Contains, PyDict_Next, PyDict_SetItem
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

from ..common._endian cimport rd16, rd32, wr32

from ..common.codes import LanguageCode, SerializeType
from . import _header_py as _py
from .command import RemotingCommand

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL

IMPLEMENTATION = "cython"

_LANG_NAMES = {int(c): c.name for c in LanguageCode}
_LANG_CODES = {c.name: int(c) for c in LanguageCode}
cdef int _OTHER = int(LanguageCode.OTHER)
_JSON = SerializeType.JSON
_ROCKETMQ = SerializeType.ROCKETMQ
_new_command = RemotingCommand.__new__


class _Fallback(Exception):
    """Internal: this input is for the pure-Python decoder to judge."""


# --- JSON decoding -------------------------------------------------------------------------------
cdef struct Cur:
    const unsigned char* p
    Py_ssize_t i
    Py_ssize_t n
    unsigned char* scratch


cdef inline void ws(Cur* c) noexcept nogil:
    cdef unsigned char ch
    while c.i < c.n:
        ch = c.p[c.i]
        if ch == 32 or ch == 9 or ch == 10 or ch == 13:
            c.i += 1
        else:
            break


cdef inline int hexval(unsigned char ch) noexcept nogil:
    if 48 <= ch <= 57:
        return ch - 48
    if 97 <= ch <= 102:
        return ch - 87
    if 65 <= ch <= 70:
        return ch - 55
    return -1


cdef object read_string(Cur* c):
    """The string at c.i (which is at its opening quote)."""
    cdef Py_ssize_t start = c.i + 1, i = start, o = 0
    cdef unsigned char ch
    cdef int h0, h1, h2, h3
    cdef uint32_t cp
    while i < c.n:
        ch = c.p[i]
        if ch == 34:  # closing quote, no escapes
            c.i = i + 1
            try:
                return PyUnicode_DecodeUTF8(<const char*>c.p + start, i - start, NULL)
            except UnicodeDecodeError:
                raise _Fallback()
        if ch == 92 or ch < 32:
            break
        i += 1
    else:
        raise _Fallback()
    if ch < 32:
        raise _Fallback()
    # With escapes: unescape into scratch (never longer than the input).
    memcpy(c.scratch, c.p + start, i - start)
    o = i - start
    while True:
        if i >= c.n:
            raise _Fallback()
        ch = c.p[i]
        if ch == 34:
            break
        if ch < 32:
            raise _Fallback()
        if ch != 92:
            c.scratch[o] = ch
            o += 1
            i += 1
            continue
        if i + 1 >= c.n:
            raise _Fallback()
        ch = c.p[i + 1]
        i += 2
        if ch == 34 or ch == 92 or ch == 47:
            c.scratch[o] = ch
        elif ch == 98:
            c.scratch[o] = 8
        elif ch == 102:
            c.scratch[o] = 12
        elif ch == 110:
            c.scratch[o] = 10
        elif ch == 114:
            c.scratch[o] = 13
        elif ch == 116:
            c.scratch[o] = 9
        elif ch == 117:
            if i + 4 > c.n:
                raise _Fallback()
            h0, h1, h2, h3 = hexval(c.p[i]), hexval(c.p[i + 1]), hexval(c.p[i + 2]), hexval(c.p[i + 3])
            if h0 < 0 or h1 < 0 or h2 < 0 or h3 < 0:
                raise _Fallback()
            cp = (h0 << 12) | (h1 << 8) | (h2 << 4) | h3
            i += 4
            if 0xD800 <= cp <= 0xDFFF:
                raise _Fallback()  # surrogates: json's pairing rules, in Python
            if cp < 0x80:
                c.scratch[o] = cp
            elif cp < 0x800:
                c.scratch[o] = 0xC0 | (cp >> 6)
                c.scratch[o + 1] = 0x80 | (cp & 0x3F)
                o += 1
            else:
                c.scratch[o] = 0xE0 | (cp >> 12)
                c.scratch[o + 1] = 0x80 | ((cp >> 6) & 0x3F)
                c.scratch[o + 2] = 0x80 | (cp & 0x3F)
                o += 2
            o += 1
            continue
        else:
            raise _Fallback()
        o += 1
    c.i = i + 1
    try:
        return PyUnicode_DecodeUTF8(<const char*>c.scratch, o, NULL)
    except UnicodeDecodeError:
        raise _Fallback()


cdef object read_int(Cur* c):
    cdef Py_ssize_t start = c.i, i = c.i, digits
    cdef int64_t v = 0
    cdef bint neg = False
    if i < c.n and c.p[i] == 45:
        neg = True
        i += 1
    digits = i
    while i < c.n and 48 <= c.p[i] <= 57:
        v = v * 10 + (c.p[i] - 48)
        i += 1
    digits = i - digits
    if digits == 0 or digits > 18:
        raise _Fallback()
    if digits > 1 and c.p[i - digits] == 48:
        raise _Fallback()  # a leading zero is not JSON
    if i < c.n and (c.p[i] == 46 or c.p[i] == 101 or c.p[i] == 69):
        raise _Fallback()  # a fraction or exponent: a float
    c.i = i
    return -v if neg else v


cdef inline bint literal(Cur* c, const char* word, Py_ssize_t n):
    cdef Py_ssize_t k
    if c.i + n > c.n:
        return False
    for k in range(n):
        if c.p[c.i + k] != <unsigned char>word[k]:
            return False
    c.i += n
    return True


cdef object read_scalar(Cur* c):
    """A string, an integer, true or false (as Python values). null, floats, objects and
    arrays go to the pure-Python decoder."""
    cdef unsigned char ch
    if c.i >= c.n:
        raise _Fallback()
    ch = c.p[c.i]
    if ch == 34:
        return read_string(c)
    if ch == 45 or 48 <= ch <= 57:
        return read_int(c)
    if ch == 116 and literal(c, "true", 4):
        return True
    if ch == 102 and literal(c, "false", 5):
        return False
    raise _Fallback()


cdef inline void expect(Cur* c, unsigned char ch) except *:
    ws(c)
    if c.i >= c.n or c.p[c.i] != ch:
        raise _Fallback()
    c.i += 1


cdef dict read_ext(Cur* c):
    cdef dict ext = {}
    ws(c)
    if c.i < c.n and c.p[c.i] == 125:
        c.i += 1
        return ext
    while True:
        ws(c)
        if c.i >= c.n or c.p[c.i] != 34:
            raise _Fallback()
        key = read_string(c)
        expect(c, 58)
        ws(c)
        value = read_scalar(c)
        if PyDict_Contains(ext, key):
            raise _Fallback()  # json keeps the first position and the last value
        if type(value) is str:
            PyDict_SetItem(ext, key, value)
        elif value is True:
            PyDict_SetItem(ext, key, "true")
        elif value is False:
            PyDict_SetItem(ext, key, "false")
        else:
            PyDict_SetItem(ext, key, str(value))
        ws(c)
        if c.i < c.n and c.p[c.i] == 44:
            c.i += 1
            continue
        if c.i < c.n and c.p[c.i] == 125:
            c.i += 1
            return ext
        raise _Fallback()


cdef object parse_json(const unsigned char* p, Py_ssize_t n, unsigned char* scratch):
    cdef Cur c
    c.p = p
    c.i = 0
    c.n = n
    c.scratch = scratch
    code = None
    opaque = 0
    flag = 0
    version = 0
    language = None
    remark = None
    ext = {}
    expect(&c, 123)
    ws(&c)
    if c.i < c.n and c.p[c.i] == 125:
        raise _Fallback()  # no code: the Python decoder says what is missing
    while True:
        ws(&c)
        if c.i >= c.n or c.p[c.i] != 34:
            raise _Fallback()
        key = read_string(&c)
        expect(&c, 58)
        ws(&c)
        if key == "extFields":
            if literal(&c, "null", 4):
                ext = {}
            else:
                expect(&c, 123)
                ext = read_ext(&c)
        elif key == "remark":
            remark = None if literal(&c, "null", 4) else read_scalar(&c)
            if remark is not None and type(remark) is not str:
                raise _Fallback()
        elif key == "language":
            language = None if literal(&c, "null", 4) else read_scalar(&c)
            if type(language) is bool:
                raise _Fallback()
        else:
            value = read_scalar(&c)
            if key == "code":
                code = value
            elif key == "opaque":
                opaque = value
            elif key == "flag":
                flag = value
            elif key == "version":
                version = value
        ws(&c)
        if c.i < c.n and c.p[c.i] == 44:
            c.i += 1
            continue
        if c.i < c.n and c.p[c.i] == 125:
            c.i += 1
            break
        raise _Fallback()
    ws(&c)
    if c.i != c.n:
        raise _Fallback()
    if not (type(code) is int and type(opaque) is int and type(flag) is int
            and type(version) is int):
        raise _Fallback()
    cmd = _new_command(RemotingCommand)
    cmd.code = code
    cmd.opaque = opaque
    cmd.flag = flag
    cmd.remark = remark
    cmd.ext_fields = ext
    cmd.body = None
    if type(language) is str:
        cmd.language = _LANG_CODES.get(language, _OTHER)
    elif language is None:
        cmd.language = _OTHER
    else:
        cmd.language = language
    cmd.version = version
    cmd.serialize_type = _JSON
    return cmd


def decode_json_header(data):
    cdef Py_buffer view
    cdef unsigned char small[2048]
    cdef unsigned char* scratch = small
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if view.len > 2048:
            scratch = <unsigned char*>malloc(view.len)
            if scratch == NULL:
                raise MemoryError()
        try:
            return parse_json(<const unsigned char*>view.buf, view.len, scratch)
        except _Fallback:
            pass
        finally:
            if scratch != small:
                free(scratch)
    finally:
        PyBuffer_Release(&view)
    return _py.decode_json_header(data)


# --- binary decoding -----------------------------------------------------------------------------
cdef object parse_binary(const unsigned char* b, Py_ssize_t n):
    cdef Py_ssize_t pos, end, klen, vlen, rlen
    if n < 17:
        raise _Fallback()
    rlen = rd32(b + 13)
    pos = 17
    if rlen < 0 or pos + rlen + 4 > n:
        raise _Fallback()
    try:
        remark = PyUnicode_DecodeUTF8(<const char*>b + pos, rlen, NULL) if rlen else None
    except UnicodeDecodeError:
        raise _Fallback()
    pos += rlen
    end = pos + 4 + rd32(b + pos)
    pos += 4
    if end < pos or end > n:
        raise _Fallback()
    cdef dict ext = {}
    try:
        while pos < end:
            if pos + 2 > end:
                raise _Fallback()
            klen = rd16(b + pos)
            pos += 2
            if klen < 0 or pos + klen + 4 > end:
                raise _Fallback()
            key = PyUnicode_DecodeUTF8(<const char*>b + pos, klen, NULL)
            pos += klen
            vlen = rd32(b + pos)
            pos += 4
            if vlen < 0 or pos + vlen > end:
                raise _Fallback()
            PyDict_SetItem(ext, key, PyUnicode_DecodeUTF8(<const char*>b + pos, vlen, NULL))
            pos += vlen
    except UnicodeDecodeError:
        raise _Fallback()
    cmd = _new_command(RemotingCommand)
    cmd.code = rd16(b)
    cmd.language = <int8_t>b[2]
    cmd.version = rd16(b + 3)
    cmd.opaque = rd32(b + 5)
    cmd.flag = rd32(b + 9)
    cmd.remark = remark
    cmd.ext_fields = ext
    cmd.body = None
    cmd.serialize_type = _ROCKETMQ
    return cmd


def decode_binary_header(data):
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return parse_binary(<const unsigned char*>view.buf, view.len)
    except _Fallback:
        pass
    finally:
        PyBuffer_Release(&view)
    return _py.decode_binary_header(data)


# --- encoding ------------------------------------------------------------------------------------
cdef struct Out:
    unsigned char* p
    Py_ssize_t n
    Py_ssize_t cap


cdef int grow(Out* o, Py_ssize_t more) except -1:
    cdef Py_ssize_t cap
    cdef unsigned char* np
    if o.n + more <= o.cap:
        return 0
    cap = max(o.cap * 2, o.n + more + 256)
    np = <unsigned char*>realloc(o.p, cap)
    if np == NULL:
        raise MemoryError()
    o.p = np
    o.cap = cap
    return 0


cdef int put(Out* o, const char* s, Py_ssize_t n) except -1:
    grow(o, n)
    memcpy(o.p + o.n, s, n)
    o.n += n
    return 0


cdef char* HEX = b"0123456789abcdef"


cdef int put_json_str(Out* o, object text) except -1:
    """As json's encoder with ensure_ascii=False: escape only quote, backslash and controls."""
    cdef Py_ssize_t n, k
    cdef const unsigned char* s
    cdef unsigned char ch
    if type(text) is not str:
        raise _Fallback()
    s = <const unsigned char*>PyUnicode_AsUTF8AndSize(text, &n)
    grow(o, 6 * n + 2)
    o.p[o.n] = 34
    o.n += 1
    for k in range(n):
        ch = s[k]
        if ch >= 32 and ch != 34 and ch != 92:
            o.p[o.n] = ch
            o.n += 1
            continue
        o.p[o.n] = 92
        if ch == 34 or ch == 92:
            o.p[o.n + 1] = ch
        elif ch == 10:
            o.p[o.n + 1] = 110
        elif ch == 13:
            o.p[o.n + 1] = 114
        elif ch == 9:
            o.p[o.n + 1] = 116
        elif ch == 8:
            o.p[o.n + 1] = 98
        elif ch == 12:
            o.p[o.n + 1] = 102
        else:
            o.p[o.n + 1] = 117
            o.p[o.n + 2] = 48
            o.p[o.n + 3] = 48
            o.p[o.n + 4] = HEX[ch >> 4]
            o.p[o.n + 5] = HEX[ch & 15]
            o.n += 4
        o.n += 2
    o.p[o.n] = 34
    o.n += 1
    return 0


cdef int put_int(Out* o, object value) except -1:
    if type(value) is not int:
        raise _Fallback()
    text = str(value).encode()
    put(o, text, len(text))
    return 0


cdef bytes json_header(cmd):
    cdef Out o
    cdef Py_ssize_t i = 0
    cdef bint first = True
    cdef PyObject* k
    cdef PyObject* v
    o.p = NULL
    o.n = 0
    o.cap = 0
    try:
        put(&o, b'{"code":', 8)
        put_int(&o, cmd.code)
        put(&o, b',"language":', 12)
        put_json_str(&o, _LANG_NAMES.get(int(cmd.language), "OTHER"))
        put(&o, b',"version":', 11)
        put_int(&o, cmd.version)
        put(&o, b',"opaque":', 10)
        put_int(&o, cmd.opaque)
        put(&o, b',"flag":', 8)
        put_int(&o, cmd.flag)
        remark = cmd.remark
        if remark is not None:
            put(&o, b',"remark":', 10)
            put_json_str(&o, remark)
        ext = cmd.ext_fields
        if ext:
            if type(ext) is not dict:
                raise _Fallback()
            put(&o, b',"extFields":{', 14)
            while PyDict_Next(ext, &i, &k, &v):
                if not first:
                    put(&o, b",", 1)
                first = False
                put_json_str(&o, <object>k)
                put(&o, b":", 1)
                put_json_str(&o, <object>v)
            put(&o, b"}", 1)
        put(&o, b',"serializeTypeCurrentRPC":"JSON"}', 34)
        return PyBytes_FromStringAndSize(<const char*>o.p, o.n)
    finally:
        free(o.p)


def encode_json_header(cmd):
    try:
        return json_header(cmd)
    except (_Fallback, UnicodeEncodeError):
        return _py.encode_json_header(cmd)


cdef bytes binary_header(cmd):
    cdef Out o
    cdef Py_ssize_t i = 0, kn, vn, rn = 0, ext_at
    cdef PyObject* k
    cdef PyObject* v
    cdef const char* kp
    cdef const char* vp
    cdef const char* rp = NULL
    code, language, version = cmd.code, int(cmd.language), cmd.version
    opaque, flag = cmd.opaque, cmd.flag
    if not (type(code) is int and type(version) is int and type(opaque) is int
            and type(flag) is int):
        raise _Fallback()
    if not (-32768 <= code <= 32767 and -128 <= language <= 127 and -32768 <= version <= 32767
            and -2**31 <= opaque < 2**31 and -2**31 <= flag < 2**31):
        raise _Fallback()
    cdef int64_t icode = code, ilang = language, iver = version, iop = opaque, ifl = flag
    remark = cmd.remark
    if remark:
        if type(remark) is not str:
            raise _Fallback()
        rp = PyUnicode_AsUTF8AndSize(remark, &rn)
    ext = cmd.ext_fields
    if type(ext) is not dict:
        raise _Fallback()
    o.p = NULL
    o.n = 0
    o.cap = 0
    try:
        grow(&o, 21 + rn)
        o.p[0] = (<uint32_t>icode) >> 8
        o.p[1] = <uint32_t>icode
        o.p[2] = <uint8_t>ilang
        o.p[3] = (<uint32_t>iver) >> 8
        o.p[4] = <uint32_t>iver
        wr32(o.p + 5, iop)
        wr32(o.p + 9, ifl)
        wr32(o.p + 13, rn)
        if rn:
            memcpy(o.p + 17, rp, rn)
        o.n = 21 + rn
        ext_at = 17 + rn
        while PyDict_Next(ext, &i, &k, &v):
            if type(<object>k) is not str or type(<object>v) is not str:
                raise _Fallback()
            kp = PyUnicode_AsUTF8AndSize(<object>k, &kn)
            vp = PyUnicode_AsUTF8AndSize(<object>v, &vn)
            if kn > 32767 or vn > 2**31 - 1:
                raise _Fallback()
            grow(&o, 6 + kn + vn)
            o.p[o.n] = kn >> 8
            o.p[o.n + 1] = kn
            memcpy(o.p + o.n + 2, kp, kn)
            wr32(o.p + o.n + 2 + kn, vn)
            memcpy(o.p + o.n + 6 + kn, vp, vn)
            o.n += 6 + kn + vn
        wr32(o.p + ext_at, o.n - ext_at - 4)
        return PyBytes_FromStringAndSize(<const char*>o.p, o.n)
    finally:
        free(o.p)


def encode_binary_header(cmd):
    try:
        return binary_header(cmd)
    except (_Fallback, UnicodeEncodeError):
        return _py.encode_binary_header(cmd)
