#!/usr/bin/env bash
# The kind demo of node-wide injection: a kind cluster with NRI enabled in containerd, the
# nvml-mock chart with a ComputeDomain topology, and a plain gpu-agent DaemonSet (no GPU
# request, no volumes, no MOCK_* env) that sees GPUs and its node's fabric identity.
#
# Usage: demo/kind/run.sh [--dry-run] [--help]
# Env: FORCE_RECREATE GPU_PROFILE GPU_COUNT WITH_COMPUTE_DOMAIN WITH_CUDA_ACT NVML_MOCK_NAMESPACE
#      WORKLOAD_NAMESPACE METRICS_WAIT_SECONDS (see demo/kind/README.md). Safe to re-run.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/../.." && pwd)"

readonly CLUSTER_NAME="nvml-mock-node-wide-demo"
readonly KUBE_CONTEXT="kind-${CLUSTER_NAME}"
readonly RELEASE_NAME="nvml-mock"
readonly CHART_DIR="${REPO_ROOT}/deploy/helm/nvml-mock"
readonly DOCKERFILE="${REPO_ROOT}/deploy/Dockerfile"
readonly KIND_CONFIG="${SCRIPT_DIR}/kind.yaml"
readonly TOPOLOGY_VALUES="${SCRIPT_DIR}/topology.yaml"
readonly WORKLOAD_MANIFEST="${SCRIPT_DIR}/gpu-agent.yaml"
readonly HOLDER_MANIFEST="${SCRIPT_DIR}/gpu-holder.yaml"
# What each gpu-holder pod holds: its node's GPU 0, with the memory of its gpu-memory
# annotation (20Gi), as nvidia-smi --query-compute-apps prints it.
readonly HOLDER_MEMORY="20480 MiB"
readonly PROMETHEUS_MANIFEST="${SCRIPT_DIR}/prometheus.yaml"
# The metrics act: what it injects on one worker's GPU 0, and the alert that must fire.
readonly METRICS_NODE="${CLUSTER_NAME}-worker"
readonly METRICS_XID=43
# a thermal fault shows the board's slowdown threshold plus 3 C: above this on every profile
readonly METRICS_HOT=80
readonly METRICS_ALERT="GPUXidError"
METRICS_WAIT_SECONDS="${METRICS_WAIT_SECONDS:-120}"
# How many times a `kubectl exec` of the metrics act is tried before the demo gives up.
EXEC_ATTEMPTS="${EXEC_ATTEMPTS:-5}"
readonly KNOWN_PROFILES="a100 h100 h200 b200 gb200 gb300 l40s t4"
readonly FABRIC_PROFILES="gb200 gb300"
readonly WAIT_TIMEOUT="180s"
# The oldest builders that build deploy/Dockerfile: Docker with BuildKit through its buildx
# plugin, and podman whose buildah can bind-mount a cached stage (buildah 1.29, podman 4.4).
readonly MIN_DOCKER="23.0"
readonly MIN_PODMAN="4.4"

# What topology.yaml says; check_fabric asserts it node by node.
readonly CLUSTER_UUID="00000000-0000-0000-0000-0000000000cd"
readonly -a CD_NODES=(
  "${CLUSTER_NAME}-worker:0"
  "${CLUSTER_NAME}-worker2:0"
  "${CLUSTER_NAME}-worker3:1"
  "${CLUSTER_NAME}-worker4:1"
)

FORCE_RECREATE="${FORCE_RECREATE:-false}"
GPU_PROFILE="${GPU_PROFILE:-gb200}"
GPU_COUNT="${GPU_COUNT:-}"
NVML_MOCK_NAMESPACE="${NVML_MOCK_NAMESPACE:-mokka}"
WORKLOAD_NAMESPACE="${WORKLOAD_NAMESPACE:-default}"
WITH_DRA_DRIVER="${WITH_DRA_DRIVER:-false}"
WITH_CUDA_ACT="${WITH_CUDA_ACT:-true}"
DRY_RUN=false

# shellcheck source=demo/kind/dra_act.sh
source "${SCRIPT_DIR}/dra_act.sh"
# shellcheck source=demo/kind/cuda_act.sh
source "${SCRIPT_DIR}/cuda_act.sh"

# Commands are echoed on the original stdout (fd 3), also from inside $(...).
exec 3>&1

usage() {
  sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

log() { printf '==> %s\n' "$*" >&3; }
die() {
  printf 'error: %s\n' "$*" >&2
  exit "${2:-1}"
}
usage_error() {
  printf 'error: %s\n' "$*" >&2
  exit 2
}

# quote ARG: ARG as a shell word that can be pasted back into a shell.
quote() {
  if [[ "$1" =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/\'\\\'\'}"
  fi
}

show() {
  local out="+" arg
  for arg in "$@"; do
    out+=" $(quote "${arg}")"
  done
  printf '%s\n' "${out}" >&3
}

# run CMD...: print it, and run it unless --dry-run.
run() {
  show "$@"
  if [[ "${DRY_RUN}" == true ]]; then
    return 0
  fi
  "$@"
}

# query CMD...: run, named for commands whose output is read (empty in --dry-run).
query() { run "$@"; }

# Every cluster call is pinned to the demo's context.
kc() { run kubectl --context "${KUBE_CONTEXT}" "$@"; }
kq() { query kubectl --context "${KUBE_CONTEXT}" "$@"; }
hc() { run helm --kube-context "${KUBE_CONTEXT}" "$@"; }

is_true() { [[ "$1" == true ]]; }

in_list() {
  local needle="$1" item
  shift
  for item in "$@"; do
    [[ "${item}" == "${needle}" ]] && return 0
  done
  return 1
}

parse_args() {
  while (($#)); do
    case "$1" in
      --dry-run) DRY_RUN=true ;;
      -h | --help)
        usage
        exit 0
        ;;
      *) usage_error "unknown argument: $1 (try --help)" ;;
    esac
    shift
  done
}

validate_config() {
  local dns_label='^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'
  # shellcheck disable=SC2086  # word-splitting the profile list is intended
  in_list "${GPU_PROFILE}" ${KNOWN_PROFILES} ||
    usage_error "GPU_PROFILE=${GPU_PROFILE} is not one of: ${KNOWN_PROFILES}"
  if [[ -n "${GPU_COUNT}" ]]; then
    if ! [[ "${GPU_COUNT}" =~ ^[0-9]{1,3}$ ]] || ((10#${GPU_COUNT} < 1 || 10#${GPU_COUNT} > 64)); then
      usage_error "GPU_COUNT=${GPU_COUNT} is not 1..64 (or empty for the profile's default)"
    fi
    GPU_COUNT="$((10#${GPU_COUNT}))"
  fi
  if [[ -z "${WITH_COMPUTE_DOMAIN:-}" ]]; then
    # shellcheck disable=SC2086
    if in_list "${GPU_PROFILE}" ${FABRIC_PROFILES}; then
      WITH_COMPUTE_DOMAIN=true
    else
      WITH_COMPUTE_DOMAIN=false
    fi
  fi
  local flag
  for flag in FORCE_RECREATE WITH_COMPUTE_DOMAIN WITH_DRA_DRIVER WITH_CUDA_ACT; do
    [[ "${!flag}" == true || "${!flag}" == false ]] ||
      usage_error "${flag}=${!flag} must be true or false"
  done
  # shellcheck disable=SC2086
  if is_true "${WITH_COMPUTE_DOMAIN}" && ! in_list "${GPU_PROFILE}" ${FABRIC_PROFILES}; then
    usage_error "WITH_COMPUTE_DOMAIN=true needs a profile with NVLink fabric (${FABRIC_PROFILES}), not ${GPU_PROFILE}"
  fi
  if is_true "${WITH_DRA_DRIVER}" && ! is_true "${WITH_COMPUTE_DOMAIN}"; then
    usage_error "WITH_DRA_DRIVER=true needs WITH_COMPUTE_DOMAIN=true (its act spans the cliques)"
  fi
  local ns
  for ns in NVML_MOCK_NAMESPACE WORKLOAD_NAMESPACE; do
    [[ "${!ns}" =~ ${dns_label} ]] || usage_error "${ns}=${!ns} is not a valid namespace name"
  done
  if [[ "${WORKLOAD_NAMESPACE}" == "${NVML_MOCK_NAMESPACE}" ]]; then
    usage_error "WORKLOAD_NAMESPACE must differ from NVML_MOCK_NAMESPACE (${NVML_MOCK_NAMESPACE}): the NRI plugin never injects its own release namespace"
  fi
  if [[ "${WORKLOAD_NAMESPACE}" == kube-system ]]; then
    usage_error "WORKLOAD_NAMESPACE must not be kube-system: the NRI plugin never injects it"
  fi
}

check_prerequisites() {
  local tool missing=()
  for tool in docker kind kubectl helm; do
    command -v "${tool}" >/dev/null 2>&1 || missing+=("${tool}")
  done
  if ((${#missing[@]})); then
    if [[ "${DRY_RUN}" == true ]]; then
      log "not installed here (a real run needs them): ${missing[*]}"
    else
      die "missing prerequisites: ${missing[*]} (see demo/kind/README.md)"
    fi
  fi
}

# version_at_least HAVE WANT: true when dotted version HAVE >= WANT (numeric, field by field).
version_at_least() {
  local -a have want
  local i
  IFS=. read -r -a have <<<"$1"
  IFS=. read -r -a want <<<"$2"
  for ((i = 0; i < ${#want[@]}; i++)); do
    local h="${have[i]:-0}" w="${want[i]}"
    h="${h%%[!0-9]*}"
    ((10#${h:-0} > 10#${w})) && return 0
    ((10#${h:-0} < 10#${w})) && return 1
  done
  return 0
}

# builder_problem VERSION_LINE BUILDX_OK: empty when `docker build` will run BuildKit (or a
# podman that builds deploy/Dockerfile correctly), else why not. VERSION_LINE is the first line
# of `docker --version`; BUILDX_OK is true when `docker buildx version` succeeded.
builder_problem() {
  local line="$1" buildx_ok="$2" version
  if [[ "${line}" =~ ^podman\ version\ ([0-9]+\.[0-9]+(\.[0-9]+)?) ]]; then
    version="${BASH_REMATCH[1]}"
    if ! version_at_least "${version}" "${MIN_PODMAN}"; then
      printf '%s' "docker is podman ${version}: podman before ${MIN_PODMAN} cannot bind-mount a cached build stage (RUN --mount=type=bind,from=build fails on a re-run, containers/buildah#4375); upgrade podman to ${MIN_PODMAN} or later"
    fi
    return 0
  fi
  if [[ "${line}" =~ ^Docker\ version\ ([0-9]+\.[0-9]+(\.[0-9]+)?) ]]; then
    version="${BASH_REMATCH[1]}"
    if ! version_at_least "${version}" "${MIN_DOCKER}"; then
      printf '%s' "Docker ${version} is too old: deploy/Dockerfile needs BuildKit with Docker ${MIN_DOCKER} or later and its buildx plugin"
    elif [[ "${DOCKER_BUILDKIT:-1}" == 0 ]]; then
      printf '%s' "DOCKER_BUILDKIT=0 forces Docker's legacy builder, which cannot build deploy/Dockerfile (RUN --mount, Dockerfile.dockerignore); unset it"
    elif [[ "${buildx_ok}" != true ]]; then
      printf '%s' "Docker ${version} has no BuildKit: 'docker buildx version' failed, so 'docker build' would fall back to the legacy builder, which cannot build deploy/Dockerfile (RUN --mount, Dockerfile.dockerignore); install the buildx plugin (docker-buildx-plugin, or github.com/docker/buildx)"
    fi
    return 0
  fi
  printf '%s' "cannot tell which builder 'docker' is ('docker --version' said: ${line:-nothing}); use Docker ${MIN_DOCKER}+ with buildx, or podman ${MIN_PODMAN}+"
}

check_builder() {
  if [[ "${DRY_RUN}" == true ]]; then
    log "builder check skipped in --dry-run (a real run needs Docker ${MIN_DOCKER}+ with buildx, or podman ${MIN_PODMAN}+)"
    return 0
  fi
  local line buildx_ok=false problem
  line="$(docker --version 2>/dev/null | head -n 1)" || true
  if docker buildx version >/dev/null 2>&1; then
    buildx_ok=true
  fi
  problem="$(builder_problem "${line}" "${buildx_ok}")"
  [[ -z "${problem}" ]] || die "${problem} (see demo/kind/README.md)"
  log "builder: ${line} (buildx: ${buildx_ok})"
}

package_version() {
  local file="$1" version
  version="$(sed -n 's/^__version__ = "\([^"]*\)"$/\1/p' "${REPO_ROOT}/${file}")"
  [[ -n "${version}" ]] || die "no __version__ in ${file}"
  printf '%s' "${version}"
}

cluster_exists() {
  local clusters
  clusters="$(query kind get clusters)"
  grep -qx "${CLUSTER_NAME}" <<<"${clusters}"
}

ensure_cluster() {
  if cluster_exists; then
    if is_true "${FORCE_RECREATE}"; then
      log "FORCE_RECREATE=true: deleting cluster ${CLUSTER_NAME}"
      run kind delete cluster --name "${CLUSTER_NAME}"
    else
      log "reusing cluster ${CLUSTER_NAME}"
      local contexts
      contexts="$(query kubectl config get-contexts --output name)"
      if ! grep -qx "${KUBE_CONTEXT}" <<<"${contexts}"; then
        run kind export kubeconfig --name "${CLUSTER_NAME}"
      fi
      local node nodes
      nodes="$(query kind get nodes --name "${CLUSTER_NAME}")"
      for node in ${nodes}; do
        run docker exec "${node}" test -S /var/run/nri/nri.sock ||
          die "node ${node} has no NRI socket: cluster ${CLUSTER_NAME} was not created with NRI enabled; re-run with FORCE_RECREATE=true"
      done
      return 0
    fi
  fi
  log "creating cluster ${CLUSTER_NAME} (NRI enabled in containerd)"
  run kind create cluster --name "${CLUSTER_NAME}" --config "${KIND_CONFIG}" --wait "${WAIT_TIMEOUT}"
}

# build_image TARGET IMAGE VERSION_FILE: builds, tags <version>-<image id>, loads it into kind
# and sets IMAGE_TAG. The id-derived tag makes a re-run roll exactly the components whose
# image changed, and nothing else.
build_image() {
  local target="$1" image="$2" version_file="$3" version id
  version="$(package_version "${version_file}")"
  log "building ${image}:${version} (--target ${target})"
  run docker build --file "${DOCKERFILE}" --target "${target}" \
    --build-arg "VERSION=${version}" --tag "${image}:${version}" "${REPO_ROOT}"
  id="$(query docker image inspect --format '{{.Id}}' "${image}:${version}")"
  if [[ "${DRY_RUN}" == true ]]; then
    IMAGE_TAG="${version}-dryrun"
  else
    id="${id#sha256:}"
    IMAGE_TAG="${version}-${id:0:12}"
  fi
  run docker tag "${image}:${version}" "${image}:${IMAGE_TAG}"
  run kind load docker-image "${image}:${IMAGE_TAG}" --name "${CLUSTER_NAME}"
}

build_and_load_images() {
  build_image engine nvml-mock-engine packages/nvml-engine/src/nvml_mock_engine/_version.py
  ENGINE_TAG="${IMAGE_TAG}"
  build_image nri-plugin nvml-mock-nri-plugin packages/nri-plugin/src/nvml_mock_nri/_version.py
  NRI_TAG="${IMAGE_TAG}"
  build_image topology-service nvml-mock-topology-service \
    packages/topology-service/src/nvml_mock_topology/_version.py
  TOPOLOGY_TAG="${IMAGE_TAG}"
  build_image exporter nvml-mock-exporter packages/exporter/src/nvml_mock_exporter/_version.py
  EXPORTER_TAG="${IMAGE_TAG}"
}

install_chart() {
  local args=(
    upgrade --install "${RELEASE_NAME}" "${CHART_DIR}"
    --namespace "${NVML_MOCK_NAMESPACE}" --create-namespace
    --set "image.tag=${ENGINE_TAG}"
    --set "nri.image.tag=${NRI_TAG}"
    --set "topology.image.tag=${TOPOLOGY_TAG}"
    --set "gpu.profile=${GPU_PROFILE}"
    --set "nri.enabled=true"
    --set "exporter.enabled=true"
    --set "exporter.image.tag=${EXPORTER_TAG}"
    --set "exporter.prometheusConfig.enabled=true"
  )
  if [[ -n "${GPU_COUNT}" ]]; then
    args+=(--set "gpu.count=${GPU_COUNT}")
  fi
  if is_true "${WITH_COMPUTE_DOMAIN}"; then
    args+=(--values "${TOPOLOGY_VALUES}")
  else
    args+=(--set "topology.enabled=false")
  fi
  if is_true "${WITH_DRA_DRIVER}"; then
    args+=(--values "${DRA_MOCK_VALUES}")
  fi
  args+=(--wait --timeout "${WAIT_TIMEOUT}")
  log "installing the chart into namespace ${NVML_MOCK_NAMESPACE}"
  hc "${args[@]}"
  kc --namespace "${NVML_MOCK_NAMESPACE}" rollout status "daemonset/${RELEASE_NAME}" --timeout "${WAIT_TIMEOUT}"
  kc --namespace "${NVML_MOCK_NAMESPACE}" rollout status "daemonset/${RELEASE_NAME}-nri" --timeout "${WAIT_TIMEOUT}"
  kc --namespace "${NVML_MOCK_NAMESPACE}" rollout status "daemonset/nvidia-dcgm-exporter" --timeout "${WAIT_TIMEOUT}"
  if is_true "${WITH_COMPUTE_DOMAIN}"; then
    kc --namespace "${NVML_MOCK_NAMESPACE}" rollout status "deployment/${RELEASE_NAME}-topology" --timeout "${WAIT_TIMEOUT}"
  fi
  kc --namespace "${NVML_MOCK_NAMESPACE}" get pods --output wide
}

deploy_workload() {
  log "deploying the plain gpu-agent DaemonSet into namespace ${WORKLOAD_NAMESPACE}"
  local existing
  existing="$(kq get namespace "${WORKLOAD_NAMESPACE}" --ignore-not-found --output name)"
  if [[ -z "${existing}" ]]; then
    kc create namespace "${WORKLOAD_NAMESPACE}"
  fi
  kc --namespace "${WORKLOAD_NAMESPACE}" apply --filename "${WORKLOAD_MANIFEST}"
  # Injection happens when a container is created: restart so every agent gets what the
  # chart just installed (overlay, profile, fabric identity).
  kc --namespace "${WORKLOAD_NAMESPACE}" rollout restart daemonset/gpu-agent
  kc --namespace "${WORKLOAD_NAMESPACE}" rollout status daemonset/gpu-agent --timeout "${WAIT_TIMEOUT}"
  # A run that failed in the CUDA act leaves its pod running (and recorded on its GPU):
  # gone before the allocation checks count the processes, so a re-run starts clean.
  kc --namespace "${WORKLOAD_NAMESPACE}" delete pod cuda-client --ignore-not-found --wait=true
  log "deploying the gpu-holder DaemonSet (GPU 0 of each node, ${HOLDER_MEMORY}) into namespace ${WORKLOAD_NAMESPACE}"
  kc --namespace "${WORKLOAD_NAMESPACE}" apply --filename "${HOLDER_MANIFEST}"
  kc --namespace "${WORKLOAD_NAMESPACE}" rollout status daemonset/gpu-holder --timeout "${WAIT_TIMEOUT}"
}

# pod_on_node NODE: the running gpu-agent pod on NODE (not one still terminating).
pod_on_node() {
  local node="$1" pods pod
  pods="$(kq --namespace "${WORKLOAD_NAMESPACE}" get pods --selector app=gpu-agent \
    --field-selector "spec.nodeName=${node},status.phase=Running" \
    --output 'jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}')"
  pod="$(awk 'NF == 1 { print $1; exit }' <<<"${pods}")"
  if [[ "${DRY_RUN}" == true ]]; then
    pod="gpu-agent-on-${node}"
  fi
  [[ -n "${pod}" ]] || die "no running gpu-agent pod on node ${node}"
  printf '%s' "${pod}"
}

assert_plain_workload() {
  log "asserting the gpu-agent asks for nothing: no GPU request, no volumes, no MOCK_* env"
  local spec
  spec="$(kq --namespace "${WORKLOAD_NAMESPACE}" get daemonset gpu-agent \
    --output 'jsonpath={.spec.template.spec.containers[*].resources}|{.spec.template.spec.volumes}|{.spec.template.spec.containers[*].env[*].name}')"
  if grep -q 'nvidia.com/gpu' <<<"${spec}"; then die "gpu-agent requests nvidia.com/gpu: ${spec}"; fi
  if [[ "${spec}" =~ \|\[ ]]; then die "gpu-agent has volumes: ${spec}"; fi
  if grep -q 'MOCK_' <<<"${spec}"; then die "gpu-agent sets MOCK_* env: ${spec}"; fi
}

assert_gpus_visible() {
  log "asserting nvidia-smi -L lists GPUs in every gpu-agent pod"
  local nodes node pod listing count
  nodes="$(kq --namespace "${WORKLOAD_NAMESPACE}" get pods --selector app=gpu-agent \
    --output 'jsonpath={.items[*].spec.nodeName}')"
  if [[ "${DRY_RUN}" == true ]]; then
    nodes="${CD_NODES[*]%%:*}"
  fi
  [[ -n "${nodes}" ]] || die "no gpu-agent pods: is any node labelled nvidia.com/gpu.present=true?"
  for node in ${nodes}; do
    pod="$(pod_on_node "${node}")"
    listing="$(kq --namespace "${WORKLOAD_NAMESPACE}" exec "${pod}" -- nvidia-smi -L)"
    [[ "${DRY_RUN}" == true ]] && continue
    count="$(grep -cE '^GPU [0-9]+:' <<<"${listing}" || true)"
    ((count >= 1)) || die "nvidia-smi -L in ${pod} on ${node} listed no GPU: ${listing}"
    printf '    %s: %s GPU(s)\n' "${node}" "${count}" >&3
  done
}

stager_on_node() {
  local node="$1" pod
  pod="$(kq --namespace "${NVML_MOCK_NAMESPACE}" get pods \
    --selector app.kubernetes.io/component=staging \
    --field-selector "spec.nodeName=${node},status.phase=Running" \
    --output 'jsonpath={.items[0].metadata.name}')"
  if [[ "${DRY_RUN}" == true ]]; then
    pod="nvml-mock-staging-on-${node}"
  fi
  [[ -n "${pod}" ]] || die "no running staging pod on node ${node}"
  printf '%s' "${pod}"
}

# node_compute_apps NODE: the node's own nvidia-smi --query-compute-apps (run in its staging
# pod, which sees the overlay at its host path): what the NRI plugin recorded there.
node_compute_apps() {
  local stager
  stager="$(stager_on_node "$1")"
  kq --namespace "${NVML_MOCK_NAMESPACE}" exec "${stager}" -c stage -- \
    /var/lib/nvml-mock/bin/nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
}

holder_nodes() {
  local nodes
  nodes="$(kq --namespace "${WORKLOAD_NAMESPACE}" get pods --selector app=gpu-holder \
    --output 'jsonpath={.items[*].spec.nodeName}')"
  if [[ "${DRY_RUN}" == true ]]; then
    nodes="${CD_NODES[*]%%:*}"
  fi
  [[ -n "${nodes}" ]] || die "no gpu-holder pods: is any node labelled nvidia.com/gpu.present=true?"
  printf '%s' "${nodes}"
}

assert_allocations_recorded() {
  log "asserting each node's nvidia-smi lists its gpu-holder container (${HOLDER_MEMORY}, from its annotation)"
  local node apps
  HOLDER_NODES="$(holder_nodes)"
  for node in ${HOLDER_NODES}; do
    apps="$(node_compute_apps "${node}")"
    [[ "${DRY_RUN}" == true ]] && continue
    grep -q ", ${HOLDER_MEMORY}\$" <<<"${apps}" ||
      die "nvidia-smi on ${node} lists no compute process of ${HOLDER_MEMORY}: the plugin wrote no allocation record (it listed: ${apps:-nothing})"
    printf '    %s: %s\n' "${node}" "$(head -n 1 <<<"${apps}")" >&3
  done
}

# The records go with the containers: once the gpu-holder pods are gone, no node lists a
# compute process (a record left behind would be a dead PID in every NVML client).
assert_allocations_removed() {
  log "deleting the gpu-holder DaemonSet; asserting no node's nvidia-smi lists a compute process after"
  local node apps tries
  kc --namespace "${WORKLOAD_NAMESPACE}" delete daemonset gpu-holder --wait=true
  kc --namespace "${WORKLOAD_NAMESPACE}" wait --for=delete pod --selector app=gpu-holder --timeout "${WAIT_TIMEOUT}"
  for node in ${HOLDER_NODES}; do
    for ((tries = 0; tries < 10; tries++)); do
      apps="$(node_compute_apps "${node}")"
      [[ -z "${apps}" ]] && break
      sleep 1
    done
    [[ -z "${apps}" ]] ||
      die "nvidia-smi on ${node} still lists ${apps} after the gpu-holder pods went: the plugin left a record of a dead container"
    printf '    %s: no compute process\n' "${node}" >&3
  done
}

assert_fabric_identity() {
  log "asserting every worker's check-fabric reports its clique and cluster UUID ${CLUSTER_UUID}"
  local entry node clique pod report
  for entry in "${CD_NODES[@]}"; do
    node="${entry%%:*}"
    clique="${entry##*:}"
    pod="$(pod_on_node "${node}")"
    report="$(kq --namespace "${WORKLOAD_NAMESPACE}" exec "${pod}" -- \
      check-fabric --expect-clique "${clique}" --expect-cluster-uuid "${CLUSTER_UUID}")" ||
      die "check-fabric on ${node} (${pod}) failed: ${report}"
    [[ "${DRY_RUN}" == true ]] && continue
    grep -q "cliqueId    : ${clique}" <<<"${report}" ||
      die "check-fabric on ${node} does not report cliqueId ${clique}: ${report}"
    grep -qi "clusterUuid : ${CLUSTER_UUID}" <<<"${report}" ||
      die "check-fabric on ${node} does not report clusterUuid ${CLUSTER_UUID}: ${report}"
    printf '    %s: clique %s, cluster %s\n' "${node}" "${clique}" "${CLUSTER_UUID}" >&3
  done
}

# prom_query EXPR: the demo Prometheus' answer to EXPR (its JSON; empty in --dry-run).
prom_query() {
  local encoded
  encoded="$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$1")"
  kq --namespace "${NVML_MOCK_NAMESPACE}" exec deployment/demo-prometheus -- \
    wget -qO- "http://127.0.0.1:9090/api/v1/query?query=${encoded}"
}

# prom_wait EXPR WHAT: wait (METRICS_WAIT_SECONDS) until EXPR has a result; die naming WHAT.
# A failed query (the API server refusing an exec once, the pod restarting) is one more try,
# not the end of the demo.
prom_wait() {
  local expr="$1" what="$2" answer tries
  for ((tries = 0; tries * 2 < METRICS_WAIT_SECONDS; tries++)); do
    if ! answer="$(prom_query "${expr}")"; then
      printf '    (the query failed; asking again)\n' >&3
      answer=""
      sleep 2
      continue
    fi
    [[ "${DRY_RUN}" == true ]] && return 0
    if [[ "${answer}" == *'"result":[{'* ]]; then
      printf '    %s: %s\n' "${what}" "${answer:0:200}" >&3
      return 0
    fi
    sleep 2
  done
  die "${what}: Prometheus never answered ${expr} (last: ${answer})"
}

# retrying CMD...: run CMD, again up to EXEC_ATTEMPTS times in all (2 s apart) when it fails:
# for a `kubectl exec` that the API server or kubelet may refuse once under load.
retrying() {
  local attempt
  for ((attempt = 1; ; attempt++)); do
    if "$@"; then
      return 0
    fi
    if ((attempt >= EXEC_ATTEMPTS)); then
      die "failed ${EXEC_ATTEMPTS} times: $*"
    fi
    printf '    (failed, attempt %d of %d; again in 2 s)\n' "${attempt}" "${EXEC_ATTEMPTS}" >&3
    sleep 2
  done
}

# The metrics act: a thermal fault and an Xid on one worker's GPU 0 reach Prometheus through
# the exporter, and the chart's standard alert rule fires.
act_gpu_metrics() {
  log "GPU metrics: a Prometheus scrapes nvidia-dcgm-exporter; a thermal fault and Xid ${METRICS_XID} on ${METRICS_NODE}'s GPU 0"
  local stager
  kc --namespace "${NVML_MOCK_NAMESPACE}" apply --filename "${PROMETHEUS_MANIFEST}"
  kc --namespace "${NVML_MOCK_NAMESPACE}" rollout status deployment/demo-prometheus --timeout "${WAIT_TIMEOUT}"
  prom_wait "DCGM_FI_DEV_GPU_TEMP{kubernetes_node=\"${METRICS_NODE}\",gpu=\"0\"}" "GPU 0's temperature before the fault"
  stager="$(kq --namespace "${NVML_MOCK_NAMESPACE}" get pods \
    --selector "app.kubernetes.io/name=${RELEASE_NAME}" --field-selector "spec.nodeName=${METRICS_NODE}" \
    --output 'jsonpath={.items[0].metadata.name}')"
  if [[ "${DRY_RUN}" == true ]]; then
    stager="stager-on-${METRICS_NODE}"
  fi
  [[ -n "${stager}" ]] || die "no staging pod on ${METRICS_NODE}"
  retrying kc --namespace "${NVML_MOCK_NAMESPACE}" exec "${stager}" -c stage -- \
    nvml-mock-ctl fail thermal -i 0
  retrying kc --namespace "${NVML_MOCK_NAMESPACE}" exec "${stager}" -c stage -- \
    nvml-mock-ctl xid "${METRICS_XID}" -i 0
  prom_wait "DCGM_FI_DEV_GPU_TEMP{kubernetes_node=\"${METRICS_NODE}\",gpu=\"0\"} > ${METRICS_HOT}" "the hot GPU in Prometheus"
  prom_wait "DCGM_FI_DEV_XID_ERRORS{kubernetes_node=\"${METRICS_NODE}\",gpu=\"0\"} == ${METRICS_XID}" "the Xid in Prometheus"
  prom_wait "ALERTS{alertname=\"${METRICS_ALERT}\",alertstate=\"firing\",kubernetes_node=\"${METRICS_NODE}\"}" "alert ${METRICS_ALERT} firing"
  retrying kc --namespace "${NVML_MOCK_NAMESPACE}" exec "${stager}" -c stage -- nvml-mock-ctl reset -i 0
}

main() {
  parse_args "$@"
  validate_config
  log "cluster ${CLUSTER_NAME} (context ${KUBE_CONTEXT}), profile ${GPU_PROFILE}, count ${GPU_COUNT:-profile default}, compute domain ${WITH_COMPUTE_DOMAIN}"
  check_prerequisites
  check_builder
  ensure_cluster
  build_and_load_images
  install_chart
  deploy_workload
  assert_plain_workload
  assert_gpus_visible
  assert_allocations_recorded
  assert_allocations_removed
  if is_true "${WITH_CUDA_ACT}"; then
    cuda_act
  fi
  if is_true "${WITH_COMPUTE_DOMAIN}"; then
    assert_fabric_identity
  fi
  if is_true "${WITH_DRA_DRIVER}"; then
    dra_act
  fi
  act_gpu_metrics
  log "done: every gpu-agent sees mock GPUs without asking for them"
}

main "$@"
