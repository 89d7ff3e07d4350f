# Cython declarations for grouping.py (see squall/compiled.py): each grouper's state as C struct
# members, and choose() a C call from an emit plan.
cimport cython


cdef class _Grouper:
    cpdef object choose(self, list values)


@cython.final
cdef class ShuffleGrouper(_Grouper):
    cdef list _choices
    cdef Py_ssize_t _n, _i


@cython.final
cdef class LoadAwareShuffleGrouper(_Grouper):
    cdef list _order, _choices
    cdef object _rng, _load, _weights, _watched
    cdef double _refreshed, _refresh_secs
    cdef Py_ssize_t _n, _i


cdef class FieldsGrouper(_Grouper):
    cdef list _choices, _indexes
    cdef Py_ssize_t _n, _key_groups
    cdef object _single
    cdef dict _cache


@cython.final
cdef class PartialKeyGrouper(FieldsGrouper):
    cdef list _sent
    cdef dict _candidates


@cython.final
cdef class AllGrouper(_Grouper):
    cdef list _all


@cython.final
cdef class GlobalGrouper(_Grouper):
    cdef list _lowest


@cython.final
cdef class NoneGrouper(_Grouper):
    cdef list _choices
    cdef object _rng


@cython.final
cdef class CustomGrouper(_Grouper):
    cdef object _grouping, _source_task, _targets, _name
