# Cython declarations for transfer.py (see squall/compiled.py).
cimport cython


@cython.final
cdef class Outbox:
    cdef public list items
    cdef public object queue
    cdef public bint single_task
