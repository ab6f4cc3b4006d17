"""Unknown-field check of rendered Kubernetes manifests: what `kubectl --validate=strict` adds to the schema
check of tests/tools/k8s_validate.mjs, whose OpenAPI schemas allow unknown properties (a misspelt `resoures:`
passes there, and the API server drops it). Every key of a core object must be a field of its model, down to
the leaves. The models are Debian's python3-kubernetes (openapi_types / attribute_map, generated from the
Kubernetes OpenAPI spec; bookworm's 22.6 is Kubernetes 1.22's API, so a field added since then reads as
unknown until the package is newer). The custom resources are checked where k8s_validate.mjs checks them:
the core objects they embed.

  python3 k8s_fields.py NAME < rendered.yaml

Prints one line per document with what was checked. Exit: 0 no unknown field; 1 unknown fields (each with
its path and the model's fields) or a document of an unknown kind; 2 usage or no python3-kubernetes.
"""
import re
import sys

import yaml

try:
    import kubernetes
    import kubernetes.client.models as models
except ImportError as e:
    print(f"k8s_fields: cannot import kubernetes ({e}); install Debian's python3-kubernetes "
          "(scripts/deps-k8s.sh)", file=sys.stderr)
    sys.exit(2)

PRIMITIVE = {"str", "int", "bool", "float", "object", "datetime", "date"}


def check(obj, type_name, path, errors):
    """Walks obj as the model type_name ('V1PodSpec', 'list[V1Container]', 'dict(str, str)', 'str', ...),
    appending 'path: unknown field ...' to errors."""
    m = re.fullmatch(r"list\[(.+)\]", type_name)
    if m:
        for i, x in enumerate(obj if isinstance(obj, list) else []):
            check(x, m.group(1), f"{path}[{i}]", errors)
        return
    m = re.fullmatch(r"dict\(str, (.+)\)", type_name)
    if m:
        for k, x in (obj.items() if isinstance(obj, dict) else []):
            check(x, m.group(1), f"{path}.{k}", errors)
        return
    if type_name in PRIMITIVE or not isinstance(obj, dict):
        return  # a wrong type is the schema check's to report
    cls = getattr(models, type_name)
    fields = {json_name: cls.openapi_types[attr] for attr, json_name in cls.attribute_map.items()}
    for k, x in obj.items():
        if k not in fields:
            errors.append(f"{path}.{k}: unknown field of {type_name} (its fields: {', '.join(sorted(fields))})")
        else:
            check(x, fields[k], f"{path}.{k}", errors)


def embedded(obj):
    """(path, value, model) of what is checked in obj: the whole object for Job and Service, the core objects
    the custom resources embed (as tests/tools/k8s_validate.mjs); None for an unknown kind."""
    kind = f"{obj.get('apiVersion')} {obj.get('kind')}"
    spec = obj.get("spec") or {}
    if kind == "batch/v1 Job":
        return [("Job", obj, "V1Job")]
    if kind == "v1 Service":
        return [("Service", obj, "V1Service")]
    if kind == "jobset.x-k8s.io/v1alpha2 JobSet":
        return [(f"spec.replicatedJobs[{i}].template", rj.get("template"), "V1JobTemplateSpec")
                for i, rj in enumerate(spec.get("replicatedJobs") or [])]
    if kind == "trainer.kubeflow.org/v1alpha1 ClusterTrainingRuntime":
        rjs = ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []
        return [(f"spec.template.spec.replicatedJobs[{i}].template", rj.get("template"), "V1JobTemplateSpec")
                for i, rj in enumerate(rjs)]
    if kind == "kubeflow.org/v1 PyTorchJob":
        return [(f"spec.pytorchReplicaSpecs.{role}.template", rs.get("template"), "V1PodTemplateSpec")
                for role, rs in (spec.get("pytorchReplicaSpecs") or {}).items()]
    if kind == "trainer.kubeflow.org/v1alpha1 TrainJob":
        t = spec.get("trainer") or {}
        out = [("spec.trainer.resourcesPerNode", t["resourcesPerNode"], "V1ResourceRequirements")] \
            if "resourcesPerNode" in t else []
        return out + [(f"spec.trainer.env[{i}]", e, "V1EnvVar") for i, e in enumerate(t.get("env") or [])]
    return None


def main():
    if len(sys.argv) != 2:
        print("usage: python3 k8s_fields.py NAME < rendered.yaml", file=sys.stderr)
        return 2
    name = sys.argv[1]
    failed = 0
    for obj in (d for d in yaml.safe_load_all(sys.stdin) if d):
        ident = f"{obj.get('apiVersion')} {obj.get('kind')} {(obj.get('metadata') or {}).get('name')}"
        parts = embedded(obj)
        if not parts:
            print(f"{name}: {ident}: {'no model for this kind here' if parts is None else 'nothing to check'}",
                  file=sys.stderr)
            failed += 1
            continue
        errors = []
        for path, value, model in parts:
            check(value, model, path, errors)
        for e in errors:
            print(f"{name}: {ident}: {e}", file=sys.stderr)
        failed += bool(errors)
        print(f"{name}: {ident}: fields of {', '.join(p for p, _, _ in parts)} "
              f"{'UNKNOWN FIELDS' if errors else 'known'} (python3-kubernetes {kubernetes.__version__})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
