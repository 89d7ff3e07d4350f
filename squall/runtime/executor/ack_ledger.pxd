# Cython declarations for ack_ledger.py (see squall/compiled.py).
cimport cython


@cython.final
cdef class RoundAcks:
    cdef public dict acks
    cdef public dict inits

    cpdef void init(self, root, val, spout_task)


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


cpdef void combine_ack(dict pending, tup)
