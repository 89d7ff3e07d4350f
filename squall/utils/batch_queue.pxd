# Cython declarations for batch_queue.py (see squall/compiled.py): the queue's fields as C struct
# members, so that a put, an offer or a take reads no attribute by name.
cdef class Bell:
    cdef public bint waiting
    cdef object _lock, _rung, _pipe


cdef class BatchQueue:
    cdef public Py_ssize_t capacity
    cdef public str name
    cdef public object on_release
    cdef public object consumer
    cdef object _items
    cdef Py_ssize_t _size
    cdef list _local
    cdef Py_ssize_t _local_size, _taken
    cdef object _seq
    cdef Py_ssize_t _remote, _remote_taken
    cdef dict _arrived
    cdef readonly object _lock
    cdef readonly Bell _bell
    cdef object _not_full
    cdef readonly Py_ssize_t _producers_waiting
    cdef list _room_waiters

    cpdef bint has_room(self)
    cpdef list _drain(self)
