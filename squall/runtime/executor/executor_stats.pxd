# Cython declarations for executor_stats.py (see squall/compiled.py).
cimport cython


@cython.final
cdef class ExecutorStats:
    cdef public long long acked, failed, executed, process_count, complete_count
    cdef public double execute_secs, process_secs, complete_secs
    cdef public bint process_is_execute
    cdef object _busy_marks
    cdef object _sample_tup
    cdef double _sample_t0

    cpdef void sample(self, tup)
    cpdef void record_ack(self, tup)
    cpdef void record_fail(self, tup)
    cpdef void record_execute(self, long long count, double secs)
