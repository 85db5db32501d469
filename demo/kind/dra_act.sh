# shellcheck shell=bash
# The kind demo's DRA act (sourced by run.sh; WITH_DRA_DRIVER=true): NVIDIA's DRA driver,
# unmodified, beside the mock. A ComputeDomain across the workers reaches Ready, a workload
# with its channel claim runs check-fabric --imex, one node's IMEX daemon is killed and its
# clique's domain reports degraded, and a pod with a GPU claim sees exactly its GPU.

readonly DRA_VALUES="${REPO_ROOT}/deploy/dra-driver/dra-driver-values.yaml"
# shellcheck disable=SC2034 # used by run.sh's install_chart
readonly DRA_MOCK_VALUES="${REPO_ROOT}/deploy/dra-driver/nvml-mock-values.yaml"
readonly DRA_CD_MANIFEST="${SCRIPT_DIR}/dra/compute-domain.yaml"
readonly DRA_GPU_MANIFEST="${SCRIPT_DIR}/dra/gpu-claim.yaml"
readonly DRA_NAMESPACE="${DRA_NAMESPACE:-nvidia-dra-driver-gpu}"
# NVIDIA's chart: a local checkout's deployments/helm/dra-driver-nvidia-gpu, or the chart
# name in DRA_DRIVER_REPO.
DRA_DRIVER_CHART="${DRA_DRIVER_CHART:-nvidia-dra-driver-gpu}"
DRA_DRIVER_REPO="${DRA_DRIVER_REPO:-https://helm.ngc.nvidia.com/nvidia}"
DRA_DRIVER_VERSION="${DRA_DRIVER_VERSION:-}"
readonly IMEX_DEGRADED_WITHIN=5

install_dra_driver() {
  local args=(upgrade --install nvidia-dra-driver-gpu "${DRA_DRIVER_CHART}"
    --namespace "${DRA_NAMESPACE}" --create-namespace --values "${DRA_VALUES}")
  if [[ ! -d "${DRA_DRIVER_CHART}" ]]; then
    args+=(--repo "${DRA_DRIVER_REPO}")
  fi
  if [[ -n "${DRA_DRIVER_VERSION}" ]]; then
    args+=(--version "${DRA_DRIVER_VERSION}")
  fi
  args+=(--wait --timeout "${WAIT_TIMEOUT}")
  log "installing NVIDIA's DRA driver (${DRA_DRIVER_CHART}) into namespace ${DRA_NAMESPACE}"
  hc "${args[@]}"
}

# cd_daemon_pods: "NODE POD" per compute-domain daemon pod of the demo's ComputeDomain.
cd_daemon_pods() {
  local pods
  pods="$(kq --namespace "${DRA_NAMESPACE}" get pods \
    --selector "resource.nvidia.com/computeDomain=${CD_UID}" \
    --field-selector status.phase=Running \
    --output 'jsonpath={range .items[*]}{.spec.nodeName} {.metadata.name}{"\n"}{end}')"
  if [[ "${DRY_RUN}" == true ]]; then
    local entry
    pods=""
    for entry in "${CD_NODES[@]}"; do
      pods+="${entry%%:*} cd-daemon-on-${entry%%:*}"$'\n'
    done
  fi
  printf '%s' "${pods}"
}

imex_state() {
  kq --namespace "${DRA_NAMESPACE}" exec "$1" -- nvidia-imex-ctl -c /imexd/imexd.cfg -q
}

# imex_domain POD: the domain state the daemon's node status ends with (UP, DEGRADED).
imex_domain() {
  local text
  text="$(kq --namespace "${DRA_NAMESPACE}" exec "$1" -- nvidia-imex-ctl -c /imexd/imexd.cfg -N)"
  sed -n 's/^Domain State: //p' <<<"${text}"
}

assert_compute_domain() {
  log "creating a ComputeDomain across the workers and a workload with its channel claim"
  kc --namespace "${WORKLOAD_NAMESPACE}" apply --filename "${DRA_CD_MANIFEST}"
  kc --namespace "${WORKLOAD_NAMESPACE}" wait computedomain/nvml-mock-cd \
    --for=jsonpath='{.status.status}'=Ready --timeout "${WAIT_TIMEOUT}"
  CD_UID="$(kq --namespace "${WORKLOAD_NAMESPACE}" get computedomain nvml-mock-cd --output 'jsonpath={.metadata.uid}')"
  [[ "${DRY_RUN}" == true ]] && CD_UID="cd-uid"
  kc --namespace "${WORKLOAD_NAMESPACE}" rollout status daemonset/imex-workload --timeout "${WAIT_TIMEOUT}"
  local pods node pod report
  pods="$(kq --namespace "${WORKLOAD_NAMESPACE}" get pods --selector app=imex-workload \
    --output 'jsonpath={range .items[*]}{.spec.nodeName} {.metadata.name}{"\n"}{end}')"
  [[ "${DRY_RUN}" == true ]] && pods="${CD_NODES[0]%%:*} imex-workload-on-${CD_NODES[0]%%:*}"
  while read -r node pod; do
    [[ -n "${pod}" ]] || continue
    report="$(kq --namespace "${WORKLOAD_NAMESPACE}" exec "${pod}" -- check-fabric --imex)" ||
      die "check-fabric --imex on ${node} (${pod}) failed: ${report}"
    printf '    %s: %s\n' "${node}" "${report##*$'\n'}" >&3
  done <<<"${pods}"
}

assert_imex_degrades() {
  log "killing one node's IMEX daemon: its clique peer's domain must report degraded within ${IMEX_DEGRADED_WITHIN}s, the peer itself stay READY"
  local daemons victim_node victim peer_node peer state domain waited
  daemons="$(cd_daemon_pods)"
  read -r victim_node victim <<<"$(sed -n 1p <<<"${daemons}")"
  # the other daemon of the victim's clique (CD_NODES pairs the workers by clique)
  peer_node="$(clique_peer "${victim_node}")"
  peer="$(awk -v n="${peer_node}" '$1 == n { print $2; exit }' <<<"${daemons}")"
  [[ -n "${victim}" && -n "${peer}" ]] || die "no compute-domain daemons found: ${daemons}"
  state="$(imex_state "${peer}")"
  [[ "${DRY_RUN}" == true || "${state}" == READY ]] || die "${peer} is not READY before the kill: ${state}"
  kc --namespace "${DRA_NAMESPACE}" delete pod "${victim}" --grace-period=0 --force --wait=false
  # -q is the local daemon's readiness (the compute-domain daemon's probe), not the domain's:
  # the loss shows in the node status
  for ((waited = 0; waited < IMEX_DEGRADED_WITHIN * 10; waited++)); do
    domain="$(imex_domain "${peer}" || true)"
    [[ "${DRY_RUN}" == true || "${domain}" == DEGRADED ]] && break
    sleep 0.1
  done
  [[ "${DRY_RUN}" == true || "${domain}" == DEGRADED ]] ||
    die "${peer} on ${peer_node} still reports Domain State: ${domain} after its peer ${victim} was killed"
  state="$(imex_state "${peer}" || true)"
  [[ "${DRY_RUN}" == true || "${state}" == READY ]] ||
    die "${peer} on ${peer_node} is no longer READY after its peer was killed: ${state}"
  kq --namespace "${DRA_NAMESPACE}" exec "${peer}" -- nvidia-imex-ctl -c /imexd/imexd.cfg -N >&3 || true
}

# clique_peer NODE: the other worker of NODE's clique.
clique_peer() {
  local node="$1" entry clique=""
  for entry in "${CD_NODES[@]}"; do
    [[ "${entry%%:*}" == "${node}" ]] && clique="${entry##*:}"
  done
  for entry in "${CD_NODES[@]}"; do
    if [[ "${entry##*:}" == "${clique}" && "${entry%%:*}" != "${node}" ]]; then
      printf '%s' "${entry%%:*}"
      return 0
    fi
  done
}

assert_gpu_claim() {
  log "a pod with a GPU claim must see exactly the GPU the DRA driver allocated"
  kc --namespace "${WORKLOAD_NAMESPACE}" apply --filename "${DRA_GPU_MANIFEST}"
  kc --namespace "${WORKLOAD_NAMESPACE}" wait pod/gpu-claim --for=condition=Ready --timeout "${WAIT_TIMEOUT}"
  local listing claim device node uuid count
  listing="$(kq --namespace "${WORKLOAD_NAMESPACE}" exec gpu-claim -- nvidia-smi -L)"
  claim="$(kq --namespace "${WORKLOAD_NAMESPACE}" get pod gpu-claim --output 'jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}')"
  device="$(kq --namespace "${WORKLOAD_NAMESPACE}" get resourceclaim "${claim}" --output 'jsonpath={.status.allocation.devices.results[0].device}')"
  node="$(kq --namespace "${WORKLOAD_NAMESPACE}" get pod gpu-claim --output 'jsonpath={.spec.nodeName}')"
  if [[ "${DRY_RUN}" == true ]]; then
    claim="gpu-claim-gpu" device="gpu-0" node="${CD_NODES[0]%%:*}"
  fi
  uuid="$(kq get resourceslices --field-selector "spec.nodeName=${node},spec.driver=gpu.nvidia.com" \
    --output "jsonpath={.items[*].spec.devices[?(@.name==\"${device}\")].attributes.uuid.string}")"
  [[ "${DRY_RUN}" == true ]] && return 0
  count="$(grep -cE '^GPU [0-9]+:' <<<"${listing}" || true)"
  [[ "${count}" == 1 ]] || die "the GPU claim's pod lists ${count} GPUs, not 1: ${listing}"
  grep -q "GPU 0: .*(UUID: ${uuid})" <<<"${listing}" ||
    die "the GPU claim's pod does not see ${device} (${uuid}) as GPU 0: ${listing}"
  printf '    %s: %s\n' "${node}" "${listing}" >&3
}

dra_act() {
  install_dra_driver
  assert_compute_domain
  assert_imex_degrades
  assert_gpu_claim
}
