# Cython declarations for wire_values.py (see squall/compiled.py).
cpdef object wire_values(list values, serializer)
