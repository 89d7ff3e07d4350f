# Cython declarations for route.py (see squall/compiled.py).
cimport cython
from squall.api.tuple cimport StreamSource
from squall.runtime.grouping cimport _Grouper


@cython.final
cdef class StreamRoute:
    cdef public StreamSource source
    cdef public Py_ssize_t arity
    cdef public object choose
    cdef public _Grouper grouper
    cdef public bint direct
    cdef public object direct_targets
    cdef public long long emitted
    cdef public object fanout
    cdef public long long counted_transfers
    cdef public object observers
    cdef public object unobserved
    cdef public _Grouper single
    cdef public object sampler
