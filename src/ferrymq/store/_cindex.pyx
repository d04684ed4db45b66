# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled implementation of the store's per-entry index work: the same functions as
_index_py.py, writing the same bytes and returning the same results (tests/store checks both
against each other). The layouts come from index_layout.py and the record layout, read once
when the module loads."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport INT64_MAX, int32_t, int64_t
from libc.string cimport memcpy

from ..common._endian cimport rd32, rd64, wr32, wr64

from ..common.record import layout as RL
from . import index_layout as L

IMPLEMENTATION = "cython"

cdef Py_ssize_t HEADER_SIZE = L.HEADER_SIZE
cdef Py_ssize_t ENTRY_SIZE = L.ENTRY_SIZE
cdef int64_t MAX_DIFF = L.MAX_DIFF
cdef Py_ssize_t KEY_SIZE = L.KEY_ENTRY_SIZE
assert KEY_SIZE == 24


def put_keys(f, entries, Py_ssize_t start, int64_t base_phys, int64_t base_ts):
    cdef Py_buffer ev
    cdef Py_buffer mv
    cdef int64_t slots = f.slots, max_entries = f.max_entries
    cdef int64_t count = f.count, begin_ts = f.begin_ts, begin_phys = f.begin_phys
    cdef int64_t end_phys = f.end_phys, end_ts = f.end_ts
    cdef Py_ssize_t entries_at = f.entries_at, i = start, n, slot_at
    cdef int64_t e[3]
    cdef int64_t h, phys, ts, diff
    cdef int32_t prev
    cdef unsigned char* m
    cdef unsigned char* o
    cdef const char* src
    mm = f.mm
    PyObject_GetBuffer(entries, &ev, PyBUF_SIMPLE)
    try:
        n = ev.len // KEY_SIZE
        if start < 0 or start > n:
            raise ValueError(f"put_keys: start {start} outside 0..{n}")
        PyObject_GetBuffer(mm, &mv, PyBUF_WRITABLE)
        try:
            if slots < 1 or count < 1 or entries_at + max_entries * ENTRY_SIZE > mv.len:
                raise ValueError("put_keys: the index file's geometry does not fit its mapping")
            m = <unsigned char*>mv.buf
            src = <const char*>ev.buf
            while i < n:
                memcpy(e, src + i * KEY_SIZE, KEY_SIZE)
                h = e[0]
                if h < 0 or h > 0x7FFFFFFF:
                    raise ValueError(f"put_keys: key hash {h} out of range")
                if count >= max_entries:
                    break
                phys = e[1] + base_phys
                ts = e[2] + base_ts
                if count == 1 and begin_ts == 0:
                    begin_ts = ts
                    begin_phys = phys
                # A clock that stepped back must not make a new file per message.
                diff = ts - begin_ts
                if diff < 0:
                    diff = 0
                if diff > MAX_DIFF:
                    break
                slot_at = HEADER_SIZE + (h % slots) * 4
                prev = rd32(m + slot_at)
                if not 0 < prev < count:
                    prev = 0
                o = m + entries_at + count * ENTRY_SIZE
                wr32(o, h)
                wr64(o + 4, phys)
                wr32(o + 12, diff)
                wr32(o + 16, prev)
                wr32(m + slot_at, count)
                count += 1
                if phys > end_phys:
                    end_phys = phys
                if ts > end_ts:
                    end_ts = ts
                i += 1
            wr64(m, begin_ts)
            wr64(m + 8, end_ts)
            wr64(m + 16, begin_phys)
            wr64(m + 24, end_phys)
            wr32(m + 32, slots)
            wr32(m + 36, count)
        finally:
            PyBuffer_Release(&mv)
    finally:
        PyBuffer_Release(&ev)
    f.count = count
    f.begin_ts = begin_ts
    f.begin_phys = begin_phys
    f.end_phys = end_phys
    f.end_ts = end_ts
    return i


cdef Py_ssize_t CQ_SIZE = RL.CQ_ENTRY.size
assert CQ_SIZE == 20


def scan_run(raw, Py_ssize_t max_nums, Py_ssize_t max_bytes, int64_t min_phys):
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef Py_ssize_t n, i, count = 0, total = 0
    cdef int64_t phys, size, run_start = -1, run_end = -1
    cdef list runs = []
    PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char*>view.buf
        if view.len == 0 or view.len % CQ_SIZE:
            return None
        n = view.len // CQ_SIZE
        for i in range(n):
            phys = rd64(p + i * CQ_SIZE)
            size = rd32(p + i * CQ_SIZE + 8)
            if count and (count >= max_nums or total + size > max_bytes):
                break
            # Below min_phys: a segment being removed. A size that is not positive or an end
            # past int64 (which would wrap here): a damaged entry. The general walk takes all
            # three.
            if phys < min_phys or size <= 0 or phys > INT64_MAX - size:
                return None
            if run_start < 0:
                run_start, run_end = phys, phys + size
            elif run_end == phys:
                run_end = phys + size
            else:
                runs.append([run_start, run_end])
                run_start, run_end = phys, phys + size
            total += size
            count += 1
    finally:
        PyBuffer_Release(&view)
    if run_start >= 0:
        runs.append([run_start, run_end])
    return count, total, runs
