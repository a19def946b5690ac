"""What SPEC §15 promises of the deployment files that no schema checks.

    python3 deploy/promises.py job deploy/kubernetes/job.yaml
    python3 deploy/promises.py workflow deploy/github-actions/ralph-queue.yml
    python3 deploy/promises.py helper FILE     # prints the git credential helper FILE sets up

A schema accepts `restartPolicy: OnFailure`, a podFailurePolicy that retries exit 1, a grace
period shorter than ralph's stop or a worker without `--pr`; these checks do not. Each broken
promise is one line naming the file and what is wrong; the exit code is 1 when there is any.
Run by deploy/check.sh with the validators' Python (PyYAML comes with kubernetes-validate).
"""

import shlex
import sys

import yaml

# ralph exits within this many seconds of SIGTERM, having released its items (SPEC §15).
RALPH_STOP_SECONDS = 15


def job_problems(doc):
    """The Indexed Job of deploy/kubernetes/job.yaml."""
    problems = []
    if doc.get("kind") != "Job":
        return [f"kind is {doc.get('kind')!r}, not Job"]
    spec = doc.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    if spec.get("completionMode") != "Indexed":
        problems.append("completionMode is not Indexed")
    for key in ("completions", "parallelism"):
        if not isinstance(spec.get(key), int) or spec[key] < 1:
            problems.append(f"{key} is not a count of at least 1")
    if pod.get("restartPolicy") != "Never":
        problems.append("restartPolicy is not Never (a podFailurePolicy needs it)")
    grace = pod.get("terminationGracePeriodSeconds")
    if not isinstance(grace, int) or grace <= RALPH_STOP_SECONDS:
        problems.append(
            f"terminationGracePeriodSeconds {grace!r} is not above ralph's {RALPH_STOP_SECONDS} s stop"
        )
    containers = {c.get("name"): c for c in pod.get("containers") or []}
    fail_codes = set()
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
        codes = rule.get("onExitCodes")
        if rule.get("action") == "FailJob" and codes and codes.get("operator") == "In":
            if codes.get("containerName") not in containers:
                problems.append(f"podFailurePolicy names no container of the pod: {codes.get('containerName')!r}")
            fail_codes.update(codes.get("values") or [])
    for code in (1, 2):
        if code not in fail_codes:
            problems.append(f"podFailurePolicy does not fail the Job on ralph's exit {code}")
    if 0 in fail_codes or 130 in fail_codes:
        problems.append("podFailurePolicy fails the Job on exit 0 or 130")
    if spec.get("podReplacementPolicy") != "Failed":
        problems.append("podReplacementPolicy is not Failed: a retried worker could start beside the one before it")
    worker = [c for c in containers.values() if "run" in (c.get("args") or [])]
    if len(worker) != 1:
        problems.append("no single container runs `ralph run`")
    else:
        problems += worker_args_problems(worker[0].get("args"), one_item=True)
        problems += worker_id_problems(worker[0])
        for key in ("requests", "limits"):
            if not (worker[0].get("resources") or {}).get(key):
                problems.append(f"the worker has no resource {key}")
    for c in (pod.get("initContainers") or []) + list(containers.values()):
        for env in c.get("env") or []:
            if env.get("name") in ("GITHUB_TOKEN", "GH_TOKEN", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
                ref = (env.get("valueFrom") or {}).get("secretKeyRef") or {}
                if "value" in env or ref.get("key") != env["name"]:
                    problems.append(f"{c.get('name')}: {env['name']} is not its key of a Secret")
    if not (pod.get("securityContext") or {}).get("runAsNonRoot"):
        problems.append("the pod may run as root (securityContext.runAsNonRoot)")
    return problems


def worker_id_problems(container):
    """A retried index must be the same worker (it takes its lease back at once): the worker id
    names the completion index, and nothing that changes with each pod, like its name."""
    args = container.get("args") or []
    worker_id = str(args[args.index("--worker-id") + 1]) if "--worker-id" in args[:-1] else ""
    sources = {}
    for env in container.get("env") or []:
        field = ((env.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
        sources[env.get("name")] = field
    used = {name: field for name, field in sources.items() if f"$({name})" in worker_id}
    problems = []
    if not any("job-completion-index" in f for f in used.values()) and "$(JOB_COMPLETION_INDEX)" not in worker_id:
        problems.append("--worker-id does not name the Job's completion index")
    if any(f in ("metadata.name", "metadata.uid") for f in used.values()):
        problems.append("--worker-id names the pod: a retried index would wait for its own lease")
    return problems


def worker_args_problems(args, one_item):
    """ralph's command line as a queue worker, as a list of words or one shell string."""
    words = args if isinstance(args, list) else str(args).replace("\\\n", " ").split()
    problems = []
    if "--from" not in words or not str(words[words.index("--from") + 1]).startswith("github"):
        problems.append("the worker does not run `--from github`")
    for flag in ("--pr", "--max-tasks", "--worker-id"):
        if flag not in words:
            problems.append(f"the worker runs without {flag}")
    if one_item and "--max-tasks" in words and str(words[words.index("--max-tasks") + 1]) != "1":
        problems.append("a Job's worker takes more than one item (--max-tasks 1)")
    return problems


def workflow_problems(doc):
    """The matrix of workers of deploy/github-actions/ralph-queue.yml."""
    problems = []
    # YAML 1.1 reads a bare `on` as true.
    triggers = doc.get("on", doc.get(True)) or {}
    for trigger in ("schedule", "workflow_dispatch"):
        if trigger not in triggers:
            problems.append(f"no {trigger} trigger")
    perms = doc.get("permissions") or {}
    for scope in ("contents", "issues", "pull-requests"):
        if perms.get(scope) != "write":
            problems.append(f"permissions: {scope} is not write")
    workers = [
        (name, job)
        for name, job in (doc.get("jobs") or {}).items()
        if any("ralph run" in str(s.get("run", "")) for s in job.get("steps") or [])
    ]
    if len(workers) != 1:
        return problems + ["no single job runs `ralph run`"]
    name, job = workers[0]
    strategy = job.get("strategy") or {}
    if strategy.get("fail-fast") is not False:
        problems.append(f"{name}: fail-fast is not false (one worker's halt would cancel the others)")
    if not strategy.get("max-parallel"):
        problems.append(f"{name}: no max-parallel")
    if not (strategy.get("matrix") or {}).get("worker"):
        problems.append(f"{name}: no matrix of workers")
    if not job.get("timeout-minutes"):
        problems.append(f"{name}: no timeout-minutes")
    for step in job.get("steps") or []:
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            if (step.get("with") or {}).get("persist-credentials") is not False:
                problems.append(f"{name}: checkout leaves the token in .git/config for the agent")
        if "ralph run" in str(step.get("run", "")):
            run = step["run"]
            problems += [f"{name}: {p}" for p in worker_args_problems(run, one_item=False)]
            if "matrix.worker" not in run.split("--worker-id", 1)[-1].split("\n")[0]:
                problems.append(f"{name}: --worker-id does not name the matrix entry")
            token = str((step.get("env") or {}).get("GITHUB_TOKEN", ""))
            if "secrets." not in token:
                problems.append(f"{name}: GITHUB_TOKEN does not come from the secrets")
    return problems


def credential_helpers(node):
    """The `git config credential.helper VALUE` values of every shell script in the document."""
    if isinstance(node, dict):
        return [h for v in node.values() for h in credential_helpers(v)]
    if isinstance(node, list):
        return [h for v in node for h in credential_helpers(v)]
    if not isinstance(node, str) or "credential.helper" not in node:
        return []
    try:
        words = shlex.split(node.replace("\\\n", " "), comments=True)
    except ValueError:
        return []
    return [
        words[i + 3]
        for i in range(len(words) - 3)
        if words[i : i + 3] == ["git", "config", "credential.helper"]
    ]


def main(argv):
    if len(argv) != 3 or argv[1] not in ("job", "workflow", "helper"):
        print("usage: promises.py job|workflow|helper FILE", file=sys.stderr)
        return 2
    kind, path = argv[1], argv[2]
    try:
        with open(path, encoding="utf-8") as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
    except (OSError, yaml.YAMLError) as e:
        print(f"{path}: {e}", file=sys.stderr)
        return 1
    if kind == "helper":
        # deploy/check.sh runs the helper the file configures, as git would.
        helpers = credential_helpers(docs)
        if len(helpers) != 1:
            print(f"{path}: {len(helpers)} credential helpers, not one", file=sys.stderr)
            return 1
        print(helpers[0])
        return 0
    if kind == "job":
        jobs = [d for d in docs if d.get("kind") == "Job"]
        problems = job_problems(jobs[0]) if len(jobs) == 1 else ["not exactly one Job"]
    else:
        problems = workflow_problems(docs[0]) if len(docs) == 1 else ["not one workflow"]
    for p in problems:
        print(f"{path}: {p}", file=sys.stderr)
    if not problems:
        print(f"{path}: the promises of SPEC §15 hold")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
