"""The kernels of the SES automaton: the sequential heart of every selection strategy, compiled by numba.

A kernel runs the automaton of a query — states, transitions and their conditions as arrays
(:mod:`exact.engine.program`) — over the events of one evaluation, one match window per first event, and
reports what the query's ``RETURN`` keeps.  The driver (:mod:`exact.engine.driver`) calls one as
``compiled().next_match(events, machine, runs, windows, found) -> found``; the modules, read in this order:

================  ===========================================================================================
module            holds
================  ===========================================================================================
``layout``        the named tuples a kernel takes (``Events``, ``Machine``, ``RunProgram``, ``Windows``,
                  ``Found``), its working memory (``Nodes``, ``Step``, ``Mark``); the names of slots and codes
``values``        comparison by the project's rule, growing arrays, exact averages of integers
``runs``          Kleene runs and aggregates (SASE+): the run rows of the nodes, the run checks
``transitions``   the automaton's step, shared by every strategy: a table of instances on an event, binding
                  it, the conditions of a transition, the next event
``windows``       a call's windows: set-up and tear-down, reporting a match, undoing an abandoned window
``strategies``    the strategy loops: skip-till-next-match, its robust form, skip-till-any-match, contiguity
``factory``       the kernels made from these plain functions: numba-compiled (cached on disk under a digest
                  of all their sources) or plain Python (:func:`python_kernels`, Python's integers), the
                  shared step spliced into each strategy
================  ===========================================================================================

The modules hold plain Python functions; :func:`compiled` and :func:`python_kernels` are the only ways to
run them.  numba is imported only when :func:`compiled` is first called.
"""

from exact.engine.kernels.factory import Kernels, build, compiled, python_kernels, source_digest
from exact.engine.kernels.layout import (
    ABORTED,
    COUNT,
    EXISTS,
    FOUND,
    INEXACT,
    INTERVALS,
    KEPT,
    MATCHES,
    NEXT,
    OUT_FIELDS,
    SPANS,
    Arrays,
    Events,
    Found,
    Machine,
    RunProgram,
    Windows,
)

__all__ = ["ABORTED", "COUNT", "EXISTS", "FOUND", "INEXACT", "INTERVALS", "KEPT", "MATCHES", "NEXT",
           "OUT_FIELDS", "SPANS", "Arrays", "Events", "Found", "Kernels", "Machine", "RunProgram", "Windows", "build",
           "compiled", "python_kernels", "source_digest"]
