"""The chart's ``values.schema.json``: its ``topology.health`` part generated from ``HealthSpec``,
the model the CRD is generated from, so the chart accepts exactly the health a FabricTopology
does (telemetry, access and rules included) and the two cannot drift.

    python -m fabricsched.api.values_schema --write charts/fabricsched/values.schema.json
    python -m fabricsched.api.values_schema --check charts/fabricsched/values.schema.json

The rest of the file is the chart's own (its keys are not CRD fields) and is kept as written.
The CRD's structural schema is turned into JSON Schema draft-07, which Helm validates values
with: Kubernetes extensions dropped (CEL rules stay the API server's to check when the chart's
FabricTopology is applied), numeric exclusive bounds in their draft-07 form, and unknown keys
refused where the CRD prunes them.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fabricsched.api import crd, health

GENERATED = ("properties", "topology", "properties", "health")
"""Where in values.schema.json the generated schema goes."""


def draft07(node: Mapping[str, Any]) -> dict[str, Any]:
    """A structural OpenAPI v3.0 schema node as JSON Schema draft-07."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key == "properties":
            out[key] = {name: draft07(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
            out[key] = draft07(value)
        else:
            out[key] = value
    for bound, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if out.get(bound) is True:
            out[bound] = out.pop(inclusive)
        elif out.get(bound) is False:
            del out[bound]
    closed = not node.get("x-kubernetes-preserve-unknown-fields")
    if out.get("type") == "object" and "properties" in out and closed:
        out["additionalProperties"] = False
    return out


def health_schema() -> dict[str, Any]:
    schema = draft07(crd.structural(health.HealthSpec))
    schema["description"] = ("FabricTopology spec.health (docs/topology.md, docs/telemetry.md); empty keeps "
                             "the CRD's defaults.")
    return schema


def render(current: Mapping[str, Any]) -> str:
    """``current`` (the file's JSON) with its generated part replaced, as the file's text."""
    document: Any = json.loads(json.dumps(current))
    node = document
    for key in GENERATED[:-1]:
        node = node.setdefault(key, {})
    node[GENERATED[-1]] = health_schema()
    return json.dumps(document, indent=2) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fabricsched.api.values_schema", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="FILE", type=Path, help="regenerate FILE's generated part")
    mode.add_argument("--check", metavar="FILE", type=Path, help="exit 1 with a diff if FILE is stale")
    args = parser.parse_args(argv)
    path: Path = args.write or args.check
    text = path.read_text(encoding="utf-8")
    wanted = render(json.loads(text))
    if args.write is not None:
        path.write_text(wanted, encoding="utf-8")
        print(f"wrote {path}")
        return 0
    if text != wanted:
        diff = difflib.unified_diff(text.splitlines(keepends=True), wanted.splitlines(keepends=True),
                                    fromfile=str(path), tofile=f"{path} (generated)")
        sys.stdout.write("".join(diff))
        print(f"{path} is stale: run python -m fabricsched.api.values_schema --write {path}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
