# Cython declarations for ack_ledger.py (see squall/compiled.py): the maps are U64Maps of C
# integers, and a fold is a C call.
cimport cython
from squall.api.tuple cimport Tuple
from squall.utils.u64_map cimport U64Map


@cython.final
cdef class RoundAcks:
    cdef public U64Map acks
    cdef public list inits, init_tasks

    cpdef void init(self, unsigned long long root, unsigned long long val, spout_task)
    @cython.locals(to_ackers=list, completed=dict, acks=U64Map, init_tasks=list, i=Py_ssize_t)
    cpdef tuple take(self)


@cython.final
cdef class AckLedger:
    cdef public U64Map pending
    cdef public U64Map foreign
    cdef public U64Map held
    cdef public U64Map prepared
    cdef public RoundAcks round
    cdef public list acker_tasks
    cdef object _transfer
    cdef dict _sources
    cdef object _task

    cpdef void init(self, root, val, spout_task)


# the XOR of 64-bit edge ids in C, into a map of C integers: nothing allocated
cpdef void combine_ack(U64Map pending, Tuple tup)
