# Cython declarations for ack_ledger.py (see squall/compiled.py).
cimport cython
from squall.api.tuple cimport Tuple


@cython.final
cdef class RoundAcks:
    cdef public dict acks
    cdef public dict inits

    @cython.locals(prev=cython.ulonglong)
    cpdef void init(self, root, unsigned long long val, spout_task)


@cython.final
cdef class AckLedger:
    cdef public dict pending
    cdef public dict foreign
    cdef public object held
    cdef public dict prepared
    cdef public RoundAcks round
    cdef public list acker_tasks
    cdef object _transfer
    cdef dict _sources
    cdef object _task

    cpdef void init(self, root, val, spout_task)


# the XOR of 64-bit edge ids in C: one int object made per tree, for the map
@cython.locals(ack_val=cython.ulonglong, edge=cython.ulonglong, prev=cython.ulonglong)
cpdef void combine_ack(dict pending, Tuple tup)
