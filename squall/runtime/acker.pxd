# Cython declarations for acker.py (see squall/compiled.py).
cimport cython


@cython.final
cdef class RootIds:
    cdef Py_ssize_t _count
    cdef list _local
    cdef public object high_bit

    cpdef object new(self)
