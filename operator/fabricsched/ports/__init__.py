"""The typed seam between the process's adapters: what the controller tells the extender, and
what either needs from the other, as plain types and ``Protocol``s.

Rule: nothing here does I/O or imports an adapter (controller, extender, sim, cluster, app).
The controller and the extender both import these modules and never each other; the
composition root (``fabricsched.app``) hands one side's objects to the other through them.

- ``jobs``: ``JobInfo``, the one representation of a batch/v1 Job (and when it is finished);
- ``changes``: ``Change``, what the cluster state tells its subscribers;
- ``notices``: ``ObjectRef`` and ``Notice``, an Event to post, and the ``Recorder`` that posts it;
- ``views``: read-only views of the cluster state, of a topology snapshot and of reserved GPUs;
- ``errors``: the failures of API calls, wrapped so no caller sees the client's exceptions;

"""
