# Cython declarations for rand.py (see squall/compiled.py): ids from a C counter, no Python call.
cimport cython

cdef unsigned long long _state, _GAMMA, _MIX1, _MIX2


@cython.locals(z=cython.ulonglong)
cpdef unsigned long long rand64()
