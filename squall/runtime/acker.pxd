# Cython declarations for acker.py (see squall/compiled.py).
cimport cython
from squall.utils.rand cimport rand64
from squall.utils.u64_map cimport U64Map


@cython.final
cdef class RootIds:
    cdef Py_ssize_t _count
    cdef list _local
    cdef public object high_bit

    cpdef object new(self)
    cpdef object from_bits(self, unsigned long long bits)


cdef unsigned long long _FAILED


@cython.final
cdef class _Trees:
    cdef public U64Map vals, meta

    cpdef void put(self, unsigned long long root, unsigned long long val, unsigned long long meta)
    cpdef void remove(self, unsigned long long root)


@cython.final
cdef class Acker:
    cdef object _send
    cdef _Trees _newest, _older
    cdef public dict completed

    @cython.locals(i=Py_ssize_t)
    cpdef void update_many(self, list roots, list vals, list spout_tasks)
    @cython.locals(trees=_Trees)
    cpdef void update(self, unsigned long long root, unsigned long long val, long long spout_task)
    @cython.locals(trees=_Trees)
    cpdef void fail(self, unsigned long long root)
    @cython.locals(task_plus_one=cython.ulonglong)
    cpdef void reset_timeout(self, unsigned long long root)
    @cython.locals(trees=_Trees)
    cdef _Trees _trees(self, unsigned long long root)
    @cython.locals(trees=_Trees, newest=_Trees)
    cdef _Trees _newest_with(self, unsigned long long root)
    @cython.locals(roots=list, meta=cython.ulonglong, task_plus_one=cython.ulonglong, spout_task=cython.longlong)
    cdef void _settle(self, unsigned long long root, _Trees trees)
