# Cython declarations for acker.py (see squall/compiled.py).
cimport cython
from squall.utils.rand cimport rand64
from squall.utils.rotating_map cimport RotatingMap


@cython.final
cdef class RootIds:
    cdef Py_ssize_t _count
    cdef list _local
    cdef public object high_bit

    cpdef object new(self)
    cpdef object from_bits(self, unsigned long long bits)


@cython.final
cdef class _Entry:
    cdef public unsigned long long val  # the tree's XOR, in C
    cdef public long long spout_task
    cdef public bint failed


@cython.final
cdef class Acker:
    cdef object _send
    cdef RotatingMap _pending
    cdef public dict completed

    @cython.locals(i=Py_ssize_t)
    cpdef void update_many(self, list roots, list vals, list spout_tasks)
    cpdef void update(self, root, unsigned long long val, long long spout_task)
    cdef _Entry _entry(self, root)
    @cython.locals(roots=list)
    cdef void _settle(self, root, _Entry entry)
