# Cython declarations for worker_receive.py (see squall/compiled.py).
cimport cython
from squall.api.tuple cimport StreamSource, Tuple, tree_tuple


@cython.final
cdef class WorkerReceive:
    cdef public object index
    cdef object _assignment, _transport, _state, _serializer, _grants, _credits
    cdef dict _task_streams, _dispatch, _runs
    cdef frozenset _peers
    cdef set _local_ackers
    cdef object _spout_tasks

    @cython.locals(dispatch=dict, batch=list, tup=Tuple, source=StreamSource, arity=Py_ssize_t, system=bint,
                   barrier=bint, single=bint, target=tuple, n=Py_ssize_t, i=Py_ssize_t, roots=list,
                   edges=list, tree_ids=list, tasks=list, all_values=list)
    cpdef void _deliver_tuples(self, group, dict batches, list puts, dict dropped, list malformed)
