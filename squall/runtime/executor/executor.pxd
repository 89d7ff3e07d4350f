# Cython declarations for executor.py (see squall/compiled.py): the executor as a C struct, its
# hot fields typed (the rest, set as its tasks start, in the instance's dict), its turn typed.
cimport cython
from squall.runtime.executor.ack_ledger cimport AckLedger, RoundAcks
from squall.runtime.executor.executor_stats cimport ExecutorStats
from squall.runtime.executor.transfer cimport ExecutorTransfer
from squall.utils.batch_queue cimport BatchQueue


cdef class Executor:
    cdef dict __dict__
    cdef public object worker, component, spec, lock, ready, setup_error, send, _repeat_task, _tracker
    cdef public list task_ids, acker_tasks, _instances
    cdef public dict conf, system_sources, _routes, _user_metrics
    cdef public bint single_task, cooperative, stopping
    cdef public BatchQueue queue
    cdef public ExecutorStats stats
    cdef public ExecutorTransfer transfer
    cdef public AckLedger acks
    cdef public double flush_secs

    cpdef bint run_once(self, double timeout) except -1


cdef class InputExecutor(Executor):
    @cython.locals(transfer=ExecutorTransfer, stats=ExecutorStats, items=list, executed=cython.longlong,
                   i=Py_ssize_t, end=cython.double, t0=cython.double, t1=cython.double)
    cpdef bint run_once(self, double timeout) except -1
