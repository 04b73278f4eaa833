#!/usr/bin/env python3
# Vendored unchanged from the workplace recipe shared/validators/k8s/k8s_validate.py (2026-11-22): see its README there.
"""Offline schema validation of Kubernetes manifests: built-in kinds + CRDs.

usage: k8s_validate.py [--k8s-version 1.37] [--crd-dir DIR] [--dump-schemas OUT] FILE.yaml...

* Built-in kinds: the strict JSON schemas bundled in the PyPI package
  kubernetes-validate (1.37.0 bundles Kubernetes 1.25 ... 1.37), i.e. the same data as
  `kubernetes-validate --strict`, but (a) every error is listed, not just the first,
  and (b) an unknown apiVersion/kind is an ERROR (kubernetes-validate only WARNs and
  exits 0, so e.g. a removed policy/v1beta1 PodDisruptionBudget "passes").
* Custom resources: the openAPIV3Schema of each CustomResourceDefinition YAML in
  --crd-dir (default $CRD_DIR) is turned into a JSON schema: x-kubernetes-int-or-string,
  nullable, x-kubernetes-preserve-unknown-fields are honoured, and every other object
  with `properties` gets additionalProperties:false -- which is what the API server's
  strict field validation (kubectl --validate=strict) does with unknown fields.
  CEL rules (x-kubernetes-validations) are NOT evaluated; their count is printed.
Not covered by any schema: defaulting, admission webhooks, enum values that only live
in Go code (e.g. Job completionMode "indexed" vs "Indexed"), cross-object references.
"""

import argparse
import copy
import glob
import json
import os
import re
import sys

import jsonschema
import yaml
from referencing import Registry, Resource

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster on big CRDs

try:
    from kubernetes_validate import utils as kv
except ImportError:  # pragma: no cover
    kv = None


# ----------------------------------------------------------------------------- CRDs
def _convert(s, strict=True):
    """OpenAPI v3 (structural, as in CRDs) -> JSON Schema 2020-12."""
    if isinstance(s, list):
        return [_convert(x, strict) for x in s]
    if not isinstance(s, dict):
        return s
    s = {
        k: _convert(v, strict) if k not in ("enum", "default", "example", "required") else v
        for k, v in s.items()
        if k not in ("x-kubernetes-validations", "description")
    }
    if s.pop("x-kubernetes-int-or-string", False):
        s.pop("type", None)
        inner = dict(s)
        s = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
        s.update({k: v for k, v in inner.items() if k in ("pattern",)})
    preserve = s.pop("x-kubernetes-preserve-unknown-fields", False)
    if s.pop("nullable", False) and "type" in s:
        s["type"] = [s["type"], "null"]
    for k in (
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-patch-strategy",
        "x-kubernetes-patch-merge-key",
    ):
        s.pop(k, None)
    if strict and "properties" in s and "additionalProperties" not in s and not preserve:
        s["additionalProperties"] = False
    return s


def load_crds(crd_dir):
    """{(apiVersion, kind): (json_schema, n_cel_rules, source_file)}"""
    out = {}
    for f in sorted(glob.glob(os.path.join(crd_dir, "*.y*ml")) + glob.glob(os.path.join(crd_dir, "*.json"))):
        for doc in yaml.load_all(open(f), Loader=_Loader):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for v in spec["versions"]:
                if not v.get("served", True):
                    continue
                raw = v["schema"]["openAPIV3Schema"]
                sch = _convert(copy.deepcopy(raw))
                props = sch.setdefault("properties", {})
                props["apiVersion"] = {"const": f"{spec['group']}/{v['name']}"}
                props["kind"] = {"const": spec["names"]["kind"]}
                props.setdefault("metadata", {"type": "object"})
                sch.setdefault("required", [])
                sch["required"] = sorted(set(sch["required"]) | {"apiVersion", "kind", "metadata"})
                sch["$schema"] = "https://json-schema.org/draft/2020-12/schema"
                n_cel = json.dumps(raw).count("x-kubernetes-validations")
                out[(f"{spec['group']}/{v['name']}", spec["names"]["kind"])] = (sch, n_cel, os.path.basename(f))
    return out


# ----------------------------------------------------------------------------- built-ins
def builtin_validator(doc, version):
    if kv is None:
        return None
    vers = [v for v in kv.all_versions() if kv.major_minor(v) <= kv.major_minor(version)]
    if not vers:
        raise SystemExit(f"kubernetes-validate has no schemas for {version} (oldest: {kv.all_versions()[0]})")
    schema_dir = f"v{vers[-1]}-local-strict"
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", doc["apiVersion"])
    try:
        schema = kv.schema_contents(f"kubernetes-json-schema/{schema_dir}/{doc['kind'].lower()}-{api}.json", version)
    except FileNotFoundError:
        return None
    defs = kv.schema_contents(f"kubernetes-json-schema/{schema_dir}/_definitions.json", version)
    reg = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=reg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--k8s-version", default="1.37")
    ap.add_argument("--crd-dir", default=os.environ.get("CRD_DIR"))
    ap.add_argument("--dump-schemas", help="write the converted CRD JSON schemas here (for check-jsonschema)")
    ap.add_argument(
        "--expect-invalid", action="store_true", help="negative test: exit 0 only if EVERY file has at least one error"
    )
    a = ap.parse_args()
    crds = load_crds(a.crd_dir) if a.crd_dir else {}
    if a.dump_schemas:
        os.makedirs(a.dump_schemas, exist_ok=True)
        for (api, kind), (sch, _, _) in crds.items():
            p = os.path.join(a.dump_schemas, f"{kind.lower()}_{api.replace('/', '_')}.json")
            json.dump(sch, open(p, "w"))
    bad = 0
    not_caught = []
    for f in a.files:
        bad_before = bad
        for i, doc in enumerate(yaml.load_all(open(f), Loader=_Loader)):
            if not doc:
                continue
            if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
                print(f"ERROR {f}[{i}]: not a Kubernetes object (apiVersion/kind missing)")
                bad += 1
                continue
            name = f"{doc['kind']}/{doc.get('metadata', {}).get('name', '?')} ({doc['apiVersion']})"
            key = (doc["apiVersion"], doc["kind"])
            note = ""
            if key in crds:
                sch, n_cel, src = crds[key]
                val = jsonschema.Draft202012Validator(sch)
                note = f" [CRD {src}; {n_cel} CEL rule(s) not evaluated]"
            else:
                val = builtin_validator(doc, a.k8s_version)
                note = f" [k8s {a.k8s_version} strict]"
            if val is None:
                print(f"ERROR {f}: {name}: no schema (unknown or removed apiVersion/kind; CRD not in --crd-dir?)")
                bad += 1
                continue
            errs = sorted(val.iter_errors(doc), key=lambda e: list(e.absolute_path))
            if errs:
                bad += 1
                for e in errs:
                    path = ".".join(str(p) for p in e.absolute_path) or "<root>"
                    print(f"ERROR {f}: {name}: {path}: {e.message[:300]}")
            else:
                print(f"OK    {f}: {name}{note}")
        if bad == bad_before:
            not_caught.append(f)
    if a.expect_invalid:
        for f in not_caught:
            print(f"NOT CAUGHT (schema blind spot): {f}")
        return 1 if not_caught else 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
