"""What Squall's compiled modules read of Cython's ``cython`` module where Cython is not
installed (it builds the extensions; running never needs it): ``compiled``, False. Every other
use of ``cython`` in those modules sits under ``if cython.compiled``."""

compiled = False
