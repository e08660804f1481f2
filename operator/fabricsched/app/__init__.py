"""The composition root: ``fabricsched run`` built from the operator (``controller``) and the
extender (``extender``), which know each other only through the seam (``fabricsched.ports``).

Rule: this is the one package that imports both adapters. It parses the command's flags into
each part's options (``options``), builds the operator's runtime and the extender's service,
hands the service's typed views (reserved GPUs, readiness) to the operator and the operator's
state and recorder to the service (``process``). Nothing below imports it.
"""
