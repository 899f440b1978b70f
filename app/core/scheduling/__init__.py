"""Pure scheduling logic: the node snapshot, the queue, filters, scores and preemption.

Nothing here does I/O; the scheduler process in ``app.scheduler`` feeds it objects from the
revision stream and commits its decisions.
"""
