# Cython declarations for squall/api/tuple.py (see squall/compiled.py): the classes every tuple
# is made of, as C structs, so that the data path reads and writes their fields without a lookup.
cimport cython


@cython.final
cdef class StreamSource:
    cdef public str component
    cdef public str stream
    cdef public object fields


@cython.final
cdef class Tuple:
    cdef public object values
    cdef public StreamSource stream_source
    cdef public object source_task
    cdef public bint tracked
    cdef public unsigned long long root, edge  # the one tree's id and this tuple's edge in it
    cdef public dict trees  # several trees: root id -> edge id
    cdef public unsigned long long ack_val  # 64-bit XOR in C (squall.runtime.executor.ack_ledger)


@cython.locals(tup=Tuple)
cpdef Tuple tree_tuple(list values, StreamSource source, source_task, unsigned long long root,
                       unsigned long long edge)
