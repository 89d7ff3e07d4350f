# Cython declarations for rotating_map.py (see squall/compiled.py).
cimport cython


@cython.final
cdef class RotatingMap:
    cdef list _buckets

    @cython.locals(count=Py_ssize_t, bucket=dict)
    cpdef Py_ssize_t size(self)
    cpdef object put(self, key, value)
    @cython.locals(bucket=dict)
    cpdef object get(self, key, default=*)
    @cython.locals(bucket=dict)
    cpdef object pop(self, key, default=*)
    @cython.locals(bucket=dict)
    cpdef bint touch(self, key)
    cpdef dict rotate(self)
