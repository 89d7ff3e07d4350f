# Cython declarations for pending_trees.py (see squall/compiled.py).
cimport cython
from squall.runtime.executor.executor_stats cimport ExecutorStats
from squall.utils.rotating_map cimport RotatingMap


@cython.final
cdef class PendingTrees:
    cdef public object untracked
    cdef RotatingMap _trees
    cdef object _task, _report_error, _ack, _fail, _timed_root
    cdef double _timed_t0
    cdef ExecutorStats _stats

    cpdef void start(self, root, msg_id)
    cpdef void completed(self, list roots)
    cpdef void settle(self, root, bint acked)
    cpdef void settle_untracked(self, msg_id, bint acked)
    cdef void _call(self, method, msg_id)
