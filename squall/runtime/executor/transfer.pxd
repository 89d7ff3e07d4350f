# Cython declarations for transfer.py (see squall/compiled.py).
cimport cython
from squall.api.tuple cimport StreamSource, Tuple, tree_tuple
from squall.runtime.messaging.wire_values cimport wire_values

cdef int _UNTRACKED, _ONE_TREE, _TREES


@cython.final
cdef class Outbox:
    cdef public list items
    cdef public object queue
    cdef public bint single_task


@cython.final
cdef class RemoteOutbox:
    cdef public object worker_index
    cdef public list items
    cdef public Py_ssize_t count
    cdef str _stream
    cdef long long _source_task
    cdef int _kind
    cdef list _tasks, _values, _tree_ids, _roots, _edges

    cpdef void append(self, task, str stream, long long source_task, values, tree_ids)
    cpdef void append_tree(self, task, str stream, long long source_task, values, root, edge)
    cdef void _column(self, task, str stream, long long source_task, values, int kind)


@cython.final
cdef class ExecutorTransfer:
    cdef public str component
    cdef public bint blocking
    cdef public Py_ssize_t batch_size
    cdef public dict waiting
    cdef public list overflow
    cdef public object room
    cdef public frozenset local_tasks
    cdef object _transfer, _stopping, _tracker, _serializer, _credits, _wake
    cdef object _credit_version
    cdef bint _room_made
    cdef dict _outboxes
    cdef list _outbox_list
    cdef frozenset _remote_tasks

    @cython.locals(remote=RemoteOutbox, tup=Tuple)
    cpdef void send(self, tasks, StreamSource source, source_task, list values, tree_ids=*)
    @cython.locals(remote=RemoteOutbox)
    cpdef void send_tree(self, task, StreamSource source, source_task, list values, unsigned long long root,
                         unsigned long long edge)
    @cython.locals(items=list)
    cdef void _to_local(self, Outbox local, task, Tuple tup)
    cpdef void flush(self, ob)
