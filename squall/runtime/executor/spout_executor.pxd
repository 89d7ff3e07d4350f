# Cython declarations for spout_executor.py (see squall/compiled.py): the spout's turn, its
# next_tuple loop reading the collector's, the pending trees' and the send path's C fields.
cimport cython
from squall.runtime.executor.collector cimport SpoutOutputCollector
from squall.runtime.executor.executor cimport Executor
from squall.runtime.executor.executor_stats cimport ExecutorStats
from squall.runtime.executor.pending_trees cimport PendingTrees
from squall.runtime.executor.transfer cimport ExecutorTransfer


cdef class SpoutExecutor(Executor):
    @cython.locals(emitted=bint, started=cython.double)
    cpdef bint run_once(self, double timeout) except -1
    @cython.locals(emitted=bint, exhausted=bint, collector=SpoutOutputCollector, pending=PendingTrees,
                   transfer=ExecutorTransfer, before=cython.longlong, flush_at=cython.double)
    cpdef bint _next_tuples(self) except -1
