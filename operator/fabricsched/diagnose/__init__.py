"""``fabricsched diagnose NAMESPACE/NAME``: why is this job slow? The fabric, a GPU, the host,
storage, scheduling, or the application.

Rule: an adapter above ``explain`` (whose NAME resolution and cluster reads it reuses) and
``telemetry`` (whose Prometheus client and access policy it reuses). Three kinds of module,
kept apart:

- pure: ``model`` (the typed inputs and report), ``signals`` (the exporters' metrics and how each
  is judged), ``nodes`` (which series belong to which node), ``appmetric`` (the per-job step-time
  annotation), ``changes`` (recent changes from the objects), ``findings`` and ``analysis``
  (series in -> ranked causes, scores, "not measured", recovered), ``report`` (``build(inputs) ->
  Report`` and its JSON form: what the CLI prints and what the fabric page can call), ``render``
  (text and JSON) and ``scenarios`` (the demo's OpenMetrics history);
- I/O: ``cluster`` (the objects, through ``explain``), ``queries`` (Prometheus, bounded in series,
  points and time; every failure a note, never an exception);
- ``commands``: the CLI.
"""
