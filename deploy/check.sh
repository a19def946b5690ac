#!/usr/bin/env bash
# Checks the deployment files of SPEC §15, for CI (.ci/run) and for a developer:
#
#   bash deploy/check.sh validate   # the Kubernetes manifests and the workflow, against their
#                                   # schemas and the promises no schema sees, each check shown
#                                   # to fail on a broken copy first (the controls)
#   bash deploy/check.sh image      # build deploy/Containerfile with podman from a local Debian
#                                   # base made by debootstrap, then run the quickstart inside
#                                   # the image's file system (root: podman, unshare, chroot)
#   bash deploy/check.sh            # both
#
# No container registry is reachable here and containers cannot start, so the base image is a
# debootstrap of Debian's mirror, imported into podman, and the image is entered with chroot
# (`podman create` + `podman mount`) as its user, with its environment and entrypoint.
# Environment:
#   RALPH_BIN      the ralph for the image (default: `cargo build --locked --bin ralph`, the
#                  debug build the tests already made; its glibc must be the suite's or older)
#   AGENTS         agent CLIs to install in the image (default: claude; "" for none)
#   DEBIAN_SUITE   the base's release (default: this host's, else stable)
#   DEBIAN_MIRROR  default http://deb.debian.org/debian
#   DEPLOY_CACHE   kept between runs (default ~/.cache/ralph/deploy): the validators' venv, the
#                  debootstrap tarball (made again after a week) and podman's own storage (so
#                  unchanged layers are reused; DEPLOY_NO_CACHE=1 rebuilds every layer)
#   DEPLOY_STORAGE_DRIVER  podman's storage driver, overlay (default) or vfs
# Every step prints its time; any failure stops the script with the step's name.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${DEPLOY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ralph/deploy}
KUBERNETES_VALIDATE_VERSION=1.37.0
CHECK_JSONSCHEMA_VERSION=0.39.0

die() { echo "deploy/check.sh: error: $*" >&2; exit 1; }
timings=()
skipped=
current=
ctr=
# step NAME COMMAND...: runs it and records how long it took. Never called in a condition, so
# `set -e` holds inside it; the EXIT trap names the step that failed.
step() {
    local name=$1 t0 ms
    shift
    current=$name
    echo "==> $name"
    t0=$(date +%s%N)
    "$@"
    ms=$((($(date +%s%N) - t0) / 1000000))
    timings+=("$(printf '%5d.%d s  %s' $((ms / 1000)) $((ms % 1000 / 100)) "$name")")
    echo "    ($((ms / 1000)).$((ms % 1000 / 100)) s)"
    current=
}
on_exit() {
    local status=$?
    if [[ -n $ctr ]]; then
        pod umount "$ctr" >/dev/null 2>&1 || true
        pod rm -f "$ctr" >/dev/null 2>&1 || true
    fi
    [[ -n ${controls:-} ]] && rm -rf "$controls"
    if ((status != 0)); then
        echo "deploy/check.sh: FAILED${current:+ at: $current} (exit $status)" >&2
    fi
}
trap on_exit EXIT

# ---------------------------------------------------------------------------------------------
# validate

venv=$cache/venv-kv$KUBERNETES_VALIDATE_VERSION-cj$CHECK_JSONSCHEMA_VERSION
validators() {
    if [[ ! -x $venv/bin/kubernetes-validate || ! -x $venv/bin/check-jsonschema ]]; then
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check \
            "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" \
            "check-jsonschema==$CHECK_JSONSCHEMA_VERSION"
    fi
    "$venv/bin/kubernetes-validate" --version
    "$venv/bin/check-jsonschema" --version
}

manifests=("$repo"/deploy/kubernetes/*.yaml)
workflow=$repo/deploy/github-actions/ralph-queue.yml

kube_schema() { "$venv/bin/kubernetes-validate" --strict --quiet "$@"; }
workflow_schema() { "$venv/bin/check-jsonschema" --builtin-schema vendor.github-workflows "$@"; }
# What the schemas cannot see: the promises of SPEC §15 (deploy/promises.py).
kube_promises() { "$venv/bin/python" "$repo/deploy/promises.py" job "$@"; }
workflow_promises() { "$venv/bin/python" "$repo/deploy/promises.py" workflow "$@"; }

# control CHECK FILE SED-EXPRESSION WHAT: a copy of FILE broken by the expression must fail
# CHECK. A control whose expression no longer changes the file fails too, so it cannot go quiet.
control() {
    local check=$1 file=$2 expr=$3 what=$4 broken
    broken=$controls/$(basename "$file")
    sed -e "$expr" "$file" >"$broken"
    if cmp -s "$file" "$broken"; then
        die "control '$what': '$expr' changes nothing in ${file#"$repo"/}"
    fi
    if "$check" "$broken" >"$controls/out" 2>&1; then
        die "control '$what': $check accepted ${file#"$repo"/} with $expr"
    fi
    echo "    control: $what -> rejected"
}

controls_run() {
    local job=$repo/deploy/kubernetes/job.yaml
    control kube_schema "$job" 's/completionMode: Indexed/completionMod: Indexed/' \
        'a misspelt Job field'
    control kube_schema "$job" 's/parallelism: 3/parallelism: three/' 'a count that is no number'
    control workflow_schema "$workflow" 's/max-parallel:/max-paralel:/' 'a misspelt strategy key'
    control workflow_schema "$workflow" 's/timeout-minutes: 120/timeout-minute: 120/' \
        'a misspelt job key'
    control kube_promises "$job" 's/restartPolicy: Never/restartPolicy: OnFailure/' \
        'restartPolicy OnFailure'
    control kube_promises "$job" 's/values: \[1, 2\]/values: [2]/' 'exit 1 retried'
    control kube_promises "$job" 's/terminationGracePeriodSeconds: 45/terminationGracePeriodSeconds: 10/' \
        'a grace period under ralph stop time'
    control kube_promises "$job" 's/key: GITHUB_TOKEN/key: TOKEN/' 'the token from another key'
    control kube_promises "$job" 's/podReplacementPolicy: Failed/podReplacementPolicy: TerminatingOrFailed/' \
        'a replacement beside a terminating worker'
    control kube_promises "$job" "s/metadata.annotations\['batch.kubernetes.io\/job-completion-index'\]/metadata.name/" \
        'a worker id that changes with each pod'
    control workflow_promises "$workflow" 's/fail-fast: false/fail-fast: true/' 'fail-fast'
    control workflow_promises "$workflow" 's/persist-credentials: false/persist-credentials: true/' \
        'the token left in .git/config'
    control workflow_promises "$workflow" 's/ --pr / /' 'a worker without --pr'
}

validate() {
    step "validators (pip: kubernetes-validate $KUBERNETES_VALIDATE_VERSION, check-jsonschema $CHECK_JSONSCHEMA_VERSION)" validators
    controls=$(mktemp -d "${TMPDIR:-/tmp}/ralph-deploy-controls.XXXXXX")
    step "controls: broken copies are rejected" controls_run
    step "kubernetes-validate --strict ${manifests[*]#"$repo"/}" kube_schema "${manifests[@]}"
    step "check-jsonschema --builtin-schema vendor.github-workflows" workflow_schema "$workflow"
    step "the Job's promises (deploy/promises.py)" kube_promises "$repo/deploy/kubernetes/job.yaml"
    step "the workflow's promises (deploy/promises.py)" workflow_promises "$workflow"
}

# ---------------------------------------------------------------------------------------------
# image

suite=${DEBIAN_SUITE:-$(. /etc/os-release 2>/dev/null && [[ ${ID:-} == debian ]] && echo "${VERSION_CODENAME:-}" || true)}
suite=${suite:-stable}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
agents=${AGENTS-claude}
base_tar=$cache/debootstrap-$suite-minbase.tar
base_image=localhost/ralph-deploy-base:$suite
image=localhost/ralph-deploy-check:latest
# podman with storage of its own, kept in the cache: nothing of the machine's other images is
# touched, and layers that did not change are reused by the next run.
# DEPLOY_STORAGE_DRIVER=vfs where overlay cannot mount (measured here: overlay builds faster).
driver=${DEPLOY_STORAGE_DRIVER:-overlay}
pod() {
    podman --root "$cache/podman/$driver" --runroot "/run/ralph-deploy-check/$driver" \
        --storage-driver "$driver" "$@"
}

# The image check needs root and two of Debian's packages: missing, it fails in CI (CI=true)
# and is skipped with the reason on a developer's machine, as the tests do (skip_or_fail).
image_tools() {
    local missing=() why=
    for t in podman debootstrap unshare chroot; do command -v "$t" >/dev/null || missing+=("$t"); done
    ((${#missing[@]} == 0)) || why="missing ${missing[*]} (apt-get install -y podman debootstrap)"
    [[ $(id -u) == 0 ]] || why="it needs root (podman's storage, unshare, chroot)"
    if [[ -n $why ]]; then
        [[ ${CI:-} == true ]] && die "the image check cannot run: $why"
        echo "deploy/check.sh: SKIPPED the image check: $why"
        skipped=" (the image check SKIPPED: $why)"
        return 1
    fi
    podman --version
}

# What makes Debian's own debian:stable-slim slim and quick to install into (debuerreotype):
# no documentation, manual pages or translations, no fsync per file, no package caches.
slim() {
    cat >"$1/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
EOF
    echo force-unsafe-io >"$1/etc/dpkg/dpkg.cfg.d/unsafe-io"
    cat >"$1/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    find "$1/usr/share/doc" -mindepth 2 -not -name copyright -delete 2>/dev/null || true
    rm -rf "$1/usr/share/man/"* "$1/usr/share/info/"* "$1/usr/share/locale/"*
}

debootstrap_base() {
    # A week-old base is made again, and with it every layer: Debian's packages move on.
    if [[ ! -s $base_tar ]] || [[ -n $(find "$base_tar" -mtime +7) ]]; then
        local dir
        mkdir -p "$cache"
        dir=$(mktemp -d "$cache/debootstrap.XXXXXX")
        debootstrap --variant=minbase "$suite" "$dir/root" "$mirror" >"$dir/log" 2>&1 ||
            { tail -20 "$dir/log" >&2; rm -rf "$dir"; return 1; }
        slim "$dir/root"
        rm -rf "$dir/root/var/cache/apt/archives/"*.deb "$dir/root/var/lib/apt/lists/"*
        tar -C "$dir/root" -cf "$dir/base.tar" .
        mv "$dir/base.tar" "$base_tar"
        rm -rf "$dir"
    fi
    ls -l "$base_tar"
}

import_base() {
    # The image is re-imported when the tarball is newer (a fresh debootstrap).
    local stamp=$cache/podman/$driver/base-$suite.imported
    if ! pod image exists "$base_image" || [[ $base_tar -nt $stamp ]]; then
        pod import --quiet "$base_tar" "$base_image" >/dev/null
        touch "$stamp"
    fi
    pod image inspect --format '{{.Id}} {{.Size}} bytes' "$base_image"
}

ralph_binary() {
    if [[ -n ${RALPH_BIN:-} ]]; then
        ralph=$RALPH_BIN
    else
        ralph=$(cargo build --locked --quiet --manifest-path "$repo/Cargo.toml" --bin ralph \
            --message-format=json-render-diagnostics |
            sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
    fi
    [[ -x $ralph ]] || die "no ralph binary at '$ralph'"
    ralph=$(cd "$(dirname "$ralph")" && pwd)/$(basename "$ralph")
    echo "    $ralph"
}

build_image() {
    # The build context is the repository (the Containerfile copies scripts/); the binary comes
    # in through a directory of the context that holds it alone, wherever cargo put it.
    local ctx_bin=$repo/target/deploy-check
    mkdir -p "$ctx_bin"
    cp "$ralph" "$ctx_bin/ralph"
    local opts=()
    [[ ${DEPLOY_NO_CACHE:-} == 1 ]] && opts+=(--no-cache)
    # The registries here are reached through a TLS-intercepting proxy whose CA only this host
    # trusts: npm gets the host's bundle for the build (Containerfile, BUILD_CA_FILE).
    local ca=/etc/ssl/certs/ca-certificates.crt
    [[ -s $ca ]] && opts+=(--volume "$ca:/run/build-ca.crt:ro" --build-arg BUILD_CA_FILE=/run/build-ca.crt)
    pod build --isolation=chroot "${opts[@]}" -f "$repo/deploy/Containerfile" \
        --build-arg "BASE=$base_image" --build-arg "AGENTS=$agents" \
        --build-arg RALPH_BIN=target/deploy-check/ralph -t "$image" "$repo" \
        >"$cache/build.log" 2>&1 || { tail -30 "$cache/build.log" >&2; return 1; }
    pod image inspect --format '{{.Id}} {{.Size}} bytes' "$image"
}

# in_image COMMAND...: runs COMMAND in the image's file system as the image would: its user,
# environment and working directory, tini as PID 1 of a PID namespace of its own, /proc and a
# fresh /tmp, and no network but loopback. Nothing it writes outlives the container.
in_image() {
    local user workdir envs
    user=$(pod image inspect --format '{{.Config.User}}' "$image")
    workdir=$(pod image inspect --format '{{.Config.WorkingDir}}' "$image")
    mapfile -t envs < <(pod image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$image" | sed '/^$/d')
    [[ $user == *:* && ${user%%:*} != 0 && ${user%%:*} != root ]] ||
        die "the image's user is '$user', not an unprivileged uid:gid"
    unshare --mount --pid --net --fork --propagation private sh -c '
        set -e
        mnt=$1 user=$2 workdir=$3
        shift 3
        mount -t proc proc "$mnt/proc"
        mount -t tmpfs tmpfs "$mnt/tmp"
        exec chroot --userspec="$user" "$mnt" /bin/sh -c "cd \"\$0\" && exec \"\$@\"" "$workdir" "$@"
    ' sh "$mnt" "$user" "$workdir" /usr/bin/env -i "${envs[@]}" /usr/bin/tini -s -- "$@"
}

look_inside() {
    local entry status=0
    # The control: what runs inside fails through unshare, chroot and tini with its own code,
    # so a check below that fails cannot pass unseen.
    in_image sh -c 'exit 7' || status=$?
    ((status == 7)) || die "a command that exits 7 inside the image came out as $status"
    entry=$(pod image inspect --format '{{json .Config.Entrypoint}}' "$image")
    [[ $entry == '["/usr/bin/tini","--","ralph"]' ]] || die "the entrypoint is $entry"
    in_image sh -c '
        set -e
        ralph --version
        git --version
        git lfs version
        bwrap --version
        test -s /etc/ssl/certs/ca-certificates.crt
        test "$(id -u)" != 0
        for agent in "$@"; do printf "%s: " "$agent"; "$agent" --version; done
    ' sh $agents
}

# The git credential helper job.yaml and the workflow set up, run by the image's git as a push
# would run it: the token comes from the environment and is written to no file; without the
# token there is no credential at all (the control), rather than an empty password.
credentials() {
    local file helper
    for file in "$repo/deploy/kubernetes/job.yaml" "$repo/deploy/github-actions/ralph-queue.yml"; do
        helper=$("$venv/bin/python" "$repo/deploy/promises.py" helper "$file")
        in_image sh -c '
            set -e
            cd "$(mktemp -d)" && git init -q && git config credential.helper "$1"
            ask() { printf "protocol=https\nhost=github.com\npath=o/r.git\n\n" | GIT_TERMINAL_PROMPT=0 git credential fill; }
            unset GITHUB_TOKEN
            if ask >/dev/null 2>&1; then echo "credentials without a token" >&2; exit 1; fi
            export GITHUB_TOKEN=check-token-value
            out=$(ask)
            printf "%s\n" "$out" | grep -qx "username=x-access-token"
            printf "%s\n" "$out" | grep -qx "password=check-token-value"
            ! grep -rq check-token-value .git "$HOME"
        ' sh "$helper"
        echo "    ${file#"$repo"/}: the token from the environment, in no file; none without it"
    done
}

quickstart() {
    mkdir -p "$mnt/opt/ralph"
    cp -r "$repo/examples" "$mnt/opt/ralph/"
    # The README's quickstart, with the image's ralph instead of a cargo build.
    in_image env RALPH_BIN=ralph bash /opt/ralph/examples/quickstart.sh
}

# What an engine does to stop a worker: SIGTERM to the container's PID 1 (a pod deleted, a run
# cancelled). tini must hand it to ralph, and ralph's exit code (130) must come out as the
# container's, which the Job's podFailurePolicy reads. Nothing waits by sleeping: the agent
# says it started through a FIFO, and the loop's end closes a pipe the check reads.
# stop_case SIGNAL: runs a loop in the image, sends SIGNAL to its PID 1 once the agent runs,
# and sets `stopped` to the exit status that came out (or dies after 120 s).
stop_case() {
    local sig=$1 home=$mnt/home/ralph started ended line sub unshare_pid tini
    stopped=0
    mkfifo "$home/started-$sig" "$cache/ended-$sig"
    chown 1000:1000 "$home/started-$sig"
    exec {started}<>"$home/started-$sig"
    in_image sh -c '
        set -e
        mkdir "$HOME/stop-$0" && cd "$HOME/stop-$0"
        git init -q && git config user.name check && git config user.email check@localhost
        cp /opt/ralph/examples/sample-task.md RALPH_TASK.md
        git add -A && git commit -q -m task
        exec ralph run --yes --agent-cmd "sh -c \"echo started > \$HOME/started-$0; exec sleep 3600\""
    ' "$sig" >"$cache/stop-$sig.log" 2>&1 3>"$cache/ended-$sig" &
    sub=$!
    # The loop holds the pipe's only writer: reading it ends when every process of it ended.
    exec {ended}<"$cache/ended-$sig"
    rm -f "$cache/ended-$sig"
    if ! read -r -t 120 -u "$started" line; then
        cat "$cache/stop-$sig.log" >&2
        die "the agent did not start within 120 s"
    fi
    unshare_pid=$(ps -o pid= --ppid "$sub" | tr -d ' ')
    tini=$(ps -o pid= --ppid "$unshare_pid" | tr -d ' ')
    [[ $(cat "/proc/$tini/comm") == tini ]] || die "PID 1 of the image is $(cat "/proc/$tini/comm"), not tini"
    kill -"$sig" "$tini"
    if read -r -t 120 -u "$ended" line || (($? > 128)); then
        kill -KILL "$tini"
        die "the loop did not end within 120 s of SIG$sig"
    fi
    exec {started}<&- {ended}<&-
    wait "$sub" || stopped=$?
}

sigterm() {
    # The control: killed outright, ralph says nothing, so the 130 below is ralph's own and
    # not the wrappers'. (util-linux's unshare reports its child's death by a signal as 1.)
    stop_case KILL
    ((stopped != 130 && stopped != 0)) || die "SIGKILL to PID 1 came out as $stopped"
    echo "    control: SIGKILL to PID 1 -> exit $stopped"
    stop_case TERM
    tail -2 "$cache/stop-TERM.log"
    ((stopped == 130)) || { cat "$cache/stop-TERM.log" >&2; die "SIGTERM to PID 1: exit $stopped, not 130"; }
    echo "    SIGTERM to PID 1 (tini): ralph stopped the agent and exited 130"
}

image() {
    image_tools || return 0
    step "Debian base: debootstrap --variant=minbase $suite (cached: ${base_tar/#$HOME/\~})" debootstrap_base
    step "podman import of the base" import_base
    step "ralph binary" ralph_binary
    step "podman build --isolation=chroot (AGENTS=\"$agents\")" build_image
    ctr=$(pod create "$image")
    mnt=$(pod mount "$ctr")
    step "inside the image: ralph, git, git-lfs, bwrap, CA certificates, non-root, agents" look_inside
    step "inside the image: the workers' git credential helper" credentials
    step "inside the image: the quickstart (examples/quickstart.sh)" quickstart
    step "inside the image: SIGTERM to PID 1 ends ralph with exit 130" sigterm
}

case "${1:-all}" in
    validate) validate ;;
    image) image ;;
    all) validate; image ;;
    *) die "usage: deploy/check.sh [validate|image]" ;;
esac
echo "==> deploy/check.sh: all passed$skipped"
printf '%s\n' "${timings[@]}"
