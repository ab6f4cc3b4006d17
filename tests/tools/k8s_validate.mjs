// Validates rendered Kubernetes manifests (a multi-document YAML on stdin, e.g. `kubectl kustomize DIR`)
// against the Kubernetes OpenAPI schemas compiled into the npm package kubernetes-models (ajv validators
// generated from the Kubernetes OpenAPI spec). Used by tests/integration/76-k8s-manifests.sh.
//
//   node k8s_validate.mjs NPM_DIR NAME < rendered.yaml
//
// NPM_DIR holds node_modules/{kubernetes-models,yaml}. Core objects (batch/v1 Job, v1 Service) are validated
// whole. For the custom resources (JobSet, PyTorchJob, TrainJob, ClusterTrainingRuntime) no package in Debian
// or npm ships their CRD schemas, so only the core Kubernetes objects they embed are validated, each against
// its own schema: JobSet / ClusterTrainingRuntime replicatedJobs[].template (batch/v1 JobTemplateSpec),
// PyTorchJob replicaSpecs.*.template (v1 PodTemplateSpec), TrainJob trainer.resourcesPerNode (v1
// ResourceRequirements) and trainer.env (v1 EnvVar). Every document is reported with what was validated.
// Known limit: the Kubernetes OpenAPI schemas allow unknown properties, so a misspelt field name passes here
// (the API server drops it, or rejects it under strict field validation); tests/tools/k8s_fields.py checks
// the same objects for unknown fields.
// Exit: 0 all valid; 1 a document is invalid or of an unknown kind; 2 usage or missing packages.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [npmDir, name] = process.argv.slice(2);
if (!npmDir || !name) {
  console.error("usage: node k8s_validate.mjs NPM_DIR NAME < rendered.yaml");
  process.exit(2);
}
const load = async (mod) => {
  try {
    return await import(pathToFileURL(`${npmDir}/node_modules/${mod}`).href);
  } catch (e) {
    console.error(`k8s_validate: cannot load ${mod} from ${npmDir}/node_modules (${e.message}); ` +
      "install with scripts/deps-k8s.sh");
    process.exit(2);
  }
};
const YAML = await load("yaml/dist/index.js");
const core = await load("kubernetes-models/v1/index.js");
const batch = await load("kubernetes-models/batch/v1/index.js");

let failed = 0;
function check(what, Model, obj) {
  try {
    new Model(obj).validate();
    return `${what} ok`;
  } catch (e) {
    failed++;
    console.error(`${name}: ${what}: INVALID: ${e.message}`);
    return `${what} INVALID`;
  }
}
const each = (list, f) => (Array.isArray(list) ? list.flatMap(f) : [`${list} is not a list`]);

const docs = YAML.parseAllDocuments(readFileSync(0, "utf8"));
for (const d of docs) {
  if (d.errors.length) {
    console.error(`${name}: YAML error: ${d.errors[0].message}`);
    process.exit(1);
  }
}
for (const obj of docs.map((d) => d.toJSON()).filter((o) => o !== null)) {
  const id = `${obj.apiVersion} ${obj.kind} ${obj.metadata?.name}`;
  let done;
  switch (`${obj.apiVersion} ${obj.kind}`) {
    case "batch/v1 Job":
      done = [check("Job (whole object)", batch.Job, obj)];
      break;
    case "v1 Service":
      done = [check("Service (whole object)", core.Service, obj)];
      break;
    case "jobset.x-k8s.io/v1alpha2 JobSet":
      done = each(obj.spec?.replicatedJobs, (rj, i) =>
        check(`spec.replicatedJobs[${i}].template (JobTemplateSpec)`, batch.JobTemplateSpec, rj.template));
      break;
    case "trainer.kubeflow.org/v1alpha1 ClusterTrainingRuntime":
      done = each(obj.spec?.template?.spec?.replicatedJobs, (rj, i) =>
        check(`spec.template.spec.replicatedJobs[${i}].template (JobTemplateSpec)`, batch.JobTemplateSpec,
          rj.template));
      break;
    case "kubeflow.org/v1 PyTorchJob":
      done = Object.entries(obj.spec?.pytorchReplicaSpecs ?? {}).map(([role, rs]) =>
        check(`spec.pytorchReplicaSpecs.${role}.template (PodTemplateSpec)`, core.PodTemplateSpec, rs.template));
      break;
    case "trainer.kubeflow.org/v1alpha1 TrainJob": {
      const t = obj.spec?.trainer ?? {};
      done = [];
      if (t.resourcesPerNode) {
        done.push(check("spec.trainer.resourcesPerNode (ResourceRequirements)", core.ResourceRequirements,
          t.resourcesPerNode));
      }
      (t.env ?? []).forEach((e, i) => done.push(check(`spec.trainer.env[${i}] (EnvVar)`, core.EnvVar, e)));
      break;
    }
    default:
      failed++;
      console.error(`${name}: ${id}: no schema for this kind here`);
      continue;
  }
  if (done.length === 0) {
    failed++;
    console.error(`${name}: ${id}: nothing in it could be validated (missing the expected fields?)`);
  }
  console.log(`${name}: ${id}: ${done.join("; ")}`);
}
process.exit(failed ? 1 : 0);
