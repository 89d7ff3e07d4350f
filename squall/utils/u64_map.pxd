# Cython declarations for u64_map.py (see squall/compiled.py): the table in C arrays.
cimport cython

cdef unsigned long long _FIBONACCI


@cython.final
cdef class U64Map:
    cdef unsigned long long *_keys
    cdef unsigned long long *_vals
    cdef unsigned char *_used
    cdef Py_ssize_t _size, _capacity
    cdef unsigned long long _mask
    cdef int _shift

    @cython.locals(slot=Py_ssize_t)
    cpdef unsigned long long value(self, unsigned long long key)
    cpdef void set(self, unsigned long long key, unsigned long long value)
    @cython.locals(slot=Py_ssize_t)
    cpdef void xor(self, unsigned long long key, unsigned long long value)
    @cython.locals(slot=Py_ssize_t, value=cython.ulonglong)
    cpdef object pop(self, unsigned long long key, default=*)
    @cython.locals(slot=Py_ssize_t, out=list)
    cpdef list items(self)
    @cython.locals(slot=Py_ssize_t)
    cpdef list keys(self)
    cpdef void clear(self)
    @cython.locals(slot=cython.ulonglong)
    cdef inline Py_ssize_t _probe(self, unsigned long long key) noexcept
    @cython.locals(slot=Py_ssize_t)
    cdef inline Py_ssize_t _find(self, unsigned long long key) noexcept
    @cython.locals(slot=Py_ssize_t)
    cdef Py_ssize_t _slot(self, unsigned long long key) except -1
    @cython.locals(mask=cython.ulonglong, hole=cython.ulonglong, nxt=cython.ulonglong, home=cython.ulonglong,
                   stays=bint)
    cdef void _remove(self, Py_ssize_t slot)
    @cython.locals(old_keys=cython.p_ulonglong, old_vals=cython.p_ulonglong, old_used=cython.p_uchar,
                   keys=cython.p_ulonglong, vals=cython.p_ulonglong, used=cython.p_uchar,
                   old_capacity=Py_ssize_t, slot=Py_ssize_t)
    cdef int _grow_to(self, Py_ssize_t capacity) except -1
