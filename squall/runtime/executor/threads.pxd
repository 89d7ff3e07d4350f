# Cython declarations for threads.py (see squall/compiled.py): the cooperative thread's round
# calls each executor's turn as a C call.
cimport cython
from squall.runtime.executor.executor cimport Executor


cdef class _Runner:
    cdef dict __dict__
    cdef public list executors
    cdef public object _current
    cdef public long long _calls
    cdef public bint _stopping
    cdef public object round_acks


cdef class CooperativeThread(_Runner):
    @cython.locals(executor=Executor, did=bint, ran=bint, exchange_at=cython.double)
    cpdef void _loop(self, list executors) except *
