# Cython declarations for collector.py (see squall/compiled.py): the collectors and their emit
# plans as C structs, and the calls between them C calls; user code calls the methods as before.
cimport cython
from squall.api.tuple cimport StreamSource, Tuple, tree_tuple
from squall.runtime.executor.ack_ledger cimport AckLedger, combine_ack
from squall.runtime.acker cimport RootIds
from squall.runtime.executor.pending_trees cimport PendingTrees
from squall.runtime.executor.executor_stats cimport ExecutorStats
from squall.runtime.executor.route cimport StreamRoute
from squall.runtime.executor.transfer cimport ExecutorTransfer, Outbox
from squall.runtime.grouping cimport _Grouper
from squall.utils.rand cimport rand64
from squall.utils.u64_map cimport U64Map


@cython.final
cdef class EmitPlan:
    cdef readonly StreamRoute route
    cdef readonly StreamSource source
    cdef readonly Py_ssize_t arity
    cdef object choose, task_id
    cdef ExecutorTransfer transfer
    cdef _Grouper grouper
    cdef dict one_task
    cdef Py_ssize_t batch_size

    cpdef object targets(self, list values)
    @cython.locals(edge=cython.ulonglong, trees=dict)
    cpdef object emit(self, list values, Tuple anchor)
    @cython.locals(edge=cython.ulonglong, ack_val=cython.ulonglong)
    cpdef void emit_tree(self, list values, tasks, root, AckLedger acks)
    @cython.locals(ob=Outbox, items=list)
    cdef void _deliver(self, task, list values, dict tree_ids)
    @cython.locals(ob=Outbox, items=list)
    cdef void _deliver_tree(self, task, list values, unsigned long long root, unsigned long long edge)


cdef class _Collector:
    cdef object _executor, _task_id, _lock, _send
    cdef dict _routes, _plans
    cdef list _acker_tasks
    cdef AckLedger _acks
    cdef ExecutorStats _stats

    @cython.locals(plan=EmitPlan)
    cpdef EmitPlan plan(self, stream, list values)


cdef class SpoutOutputCollector(_Collector):
    cdef PendingTrees _pending
    cdef public long long emitted_count
    cdef public RootIds root_ids

    cpdef object _emit(self, values, stream, msg_id, direct_task)
    @cython.locals(plan=EmitPlan)
    cpdef object _emit_values(self, values, stream, msg_id, direct_task)


cdef class OutputCollector(_Collector):
    cdef object _owner

    cpdef list emit_anchored(self, values, stream, anchors, direct_task)
    cpdef void _ack(self, Tuple tup, U64Map pending_acks)


@cython.final
cdef class BasicOutputCollector:
    cdef OutputCollector _collector
    cdef public object input
