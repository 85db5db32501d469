# shellcheck shell=bash
# The kind demo's CUDA act (sourced by run.sh; WITH_CUDA_ACT=true, the default): a pod
# annotated nvml-mock.nvidia.com/cuda-runtime: "true" runs a small CUDA program through the
# runtime work-alike the NRI plugin preloads. It sees one GPU with the node's name for it,
# allocates 256 MiB and copies exactly; the node's nvidia-smi lists that use; Xid 79 on the
# GPU fails the program's next CUDA call with the real driver's error; reset clears it, and
# once the pod is gone the node lists no process.

readonly CUDA_MANIFEST="${SCRIPT_DIR}/cuda-client.yaml"
readonly CUDA_CLIENT="${REPO_ROOT}/demo/local/cuda_client.py"
# What the program allocates, as the node's nvidia-smi prints it.
readonly CUDA_MEMORY="256 MiB"
# The runtime's answer once its GPU fell off the bus: CUDA_ERROR_LAUNCH_FAILED passed on.
readonly CUDA_XID79_ERROR="719 cudaErrorLaunchFailure"
CUDA_WAIT_SECONDS="${CUDA_WAIT_SECONDS:-60}"

# cuda_step LOG STEP: the JSON fields of the program's STEP line in LOG as "key=value" lines
# (empty when it has not printed that step).
cuda_step() {
  python3 -c '
import json, sys
for line in sys.stdin:
    if line.startswith("@@cuda@@ "):
        record = json.loads(line[9:])
        if record.get("step") == sys.argv[1]:
            for key, value in record.items():
                print(f"{key}={json.dumps(value) if isinstance(value, (bool, dict)) else value}")
' "$2" <<<"$1"
}

# cuda_field FIELDS KEY: the value of KEY in cuda_step's output.
cuda_field() { sed -n "s/^$2=//p" <<<"$1" | head -n 1; }

# cuda_wait_for STEP: the pod's log once the program printed STEP (dies after CUDA_WAIT_SECONDS).
cuda_wait_for() {
  local step="$1" logs tries
  for ((tries = 0; tries < CUDA_WAIT_SECONDS; tries++)); do
    logs="$(kq --namespace "${WORKLOAD_NAMESPACE}" logs cuda-client)" || logs=""
    [[ "${DRY_RUN}" == true ]] && return 0
    if [[ -n "$(cuda_step "${logs}" "${step}")" ]]; then
      printf '%s' "${logs}"
      return 0
    fi
    if grep -q '^cuda-client exited' <<<"${logs}"; then
      die "the CUDA program in pod cuda-client ended before '${step}': ${logs: -600}"
    fi
    sleep 1
  done
  die "the CUDA program in pod cuda-client never printed '${step}' in ${CUDA_WAIT_SECONDS}s: ${logs: -600}"
}

# assert_cuda_program LOG: what the program saw before the fault.
assert_cuda_program() {
  local logs="$1" step
  step="$(cuda_step "${logs}" loaded)"
  [[ "$(cuda_field "${step}" library)" == */lib/cuda-runtime/libcudart.so.1[23] ]] ||
    die "the CUDA program's libcudart is not the overlay's work-alike: ${step:-no 'loaded' line} (is the plugin preloading it? the pod's annotation?)"
  step="$(cuda_step "${logs}" count)"
  [[ "$(cuda_field "${step}" count)" == 1 ]] ||
    die "cudaGetDeviceCount in pod cuda-client is not 1: ${step}"
  local props name
  props="$(cuda_step "${logs}" properties)"
  name="$(cuda_field "${props}" name)"
  [[ -n "${name}" && "$(cuda_field "${props}" code)" == 0 ]] ||
    die "cudaGetDeviceProperties in pod cuda-client failed: ${props}"
  step="$(cuda_step "${logs}" malloc)"
  [[ "$(cuda_field "${step}" code)" == 0 ]] || die "cudaMalloc of ${CUDA_MEMORY} failed: ${step}"
  step="$(cuda_step "${logs}" round-trip)"
  [[ "$(cuda_field "${step}" exact)" == true ]] || die "cudaMemcpy there and back is not exact: ${step}"
  printf '    cuda-client: 1 GPU (%s), %s allocated, copies exact\n' "${name}" "${CUDA_MEMORY}" >&3
}

# assert_cuda_listed NODE: the node's nvidia-smi lists the program's use (its own record,
# published through the plugin's socket, beside the plugin's record of the pod).
assert_cuda_listed() {
  local node="$1" apps tries
  for ((tries = 0; tries < 10; tries++)); do
    apps="$(node_compute_apps "${node}")"
    [[ "${DRY_RUN}" == true ]] && return 0
    grep -q ", ${CUDA_MEMORY}\$" <<<"${apps}" && break
    sleep 1
  done
  grep -q ", ${CUDA_MEMORY}\$" <<<"${apps}" ||
    die "nvidia-smi on ${node} lists no process using ${CUDA_MEMORY}: the CUDA program's use was not published from its container (it listed: ${apps:-nothing})"
  printf '    %s: %s\n' "${node}" "$(grep ", ${CUDA_MEMORY}\$" <<<"${apps}")" >&3
}

# assert_cuda_after LOG: the program's call after Xid 79 failed with the driver's error.
assert_cuda_after() {
  local step got
  step="$(cuda_step "$1" after)"
  got="$(cuda_field "${step}" code) $(cuda_field "${step}" error)"
  [[ "${got}" == "${CUDA_XID79_ERROR}" ]] ||
    die "after Xid 79 the CUDA program's next call answered ${got}, not ${CUDA_XID79_ERROR}: ${step}"
  printf '    cuda-client: next call after Xid 79: %s\n' "${got}" >&3
}

cuda_act() {
  log "CUDA in a pod: the runtime work-alike (annotation nvml-mock.nvidia.com/cuda-runtime), Xid 79 fails its next call"
  local node stager logs apps tries
  kc --namespace "${WORKLOAD_NAMESPACE}" delete pod cuda-client --ignore-not-found --wait=true
  kc --namespace "${WORKLOAD_NAMESPACE}" delete configmap cuda-client --ignore-not-found
  kc --namespace "${WORKLOAD_NAMESPACE}" create configmap cuda-client \
    "--from-file=cuda_client.py=${CUDA_CLIENT}"
  kc --namespace "${WORKLOAD_NAMESPACE}" apply --filename "${CUDA_MANIFEST}"
  kc --namespace "${WORKLOAD_NAMESPACE}" wait --for=condition=Ready pod/cuda-client --timeout "${WAIT_TIMEOUT}"
  node="$(kq --namespace "${WORKLOAD_NAMESPACE}" get pod cuda-client --output 'jsonpath={.spec.nodeName}')"
  if [[ "${DRY_RUN}" == true ]]; then
    node="${CLUSTER_NAME}-worker"
  fi
  logs="$(cuda_wait_for waiting)"
  [[ "${DRY_RUN}" == true ]] || assert_cuda_program "${logs}"
  assert_cuda_listed "${node}"
  stager="$(stager_on_node "${node}")"
  retrying kc --namespace "${NVML_MOCK_NAMESPACE}" exec "${stager}" -c stage -- \
    nvml-mock-ctl fail fallen-off-bus -i 0
  retrying kc --namespace "${WORKLOAD_NAMESPACE}" exec cuda-client -- touch /tmp/go
  logs="$(cuda_wait_for after)"
  [[ "${DRY_RUN}" == true ]] || assert_cuda_after "${logs}"
  retrying kc --namespace "${NVML_MOCK_NAMESPACE}" exec "${stager}" -c stage -- nvml-mock-ctl reset -i 0
  kc --namespace "${WORKLOAD_NAMESPACE}" delete pod cuda-client --wait=true
  kc --namespace "${WORKLOAD_NAMESPACE}" delete configmap cuda-client --ignore-not-found
  for ((tries = 0; tries < 10; tries++)); do
    apps="$(node_compute_apps "${node}")"
    [[ -z "${apps}" ]] && break
    sleep 1
  done
  [[ -z "${apps}" ]] ||
    die "nvidia-smi on ${node} still lists ${apps} after pod cuda-client went: its CUDA record was left behind"
  printf '    %s: no compute process after the pod went\n' "${node}" >&3
}
