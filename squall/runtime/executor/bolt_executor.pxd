# Cython declarations for bolt_executor.py (see squall/compiled.py): the auto-ack of a BasicBolt's
# input is a C call into the ack ledger.
from squall.runtime.executor.ack_ledger cimport combine_ack
