#!/bin/sh
# Test support for running kind (rootful Podman, kind's podman provider) on a machine of this
# project's kind: a root VM that refuses raising resource limits inside containers, uses the
# cgroup v1 hybrid layout, has no /lib/modules, and may run the local provider's cluster at the
# same time. None of this belongs in the product: a CI runner with Docker or Podman needs none of it.
#
# What it does, and why:
# - runc without rlimits: this VM refuses setrlimit above the current hard limits inside
#   containers (no CAP_SYS_RESOURCE in the bounding set), and rootful Podman always asks for
#   RLIMIT_NOFILE=1048576, so every container fails with "error setting rlimit type 7:
#   operation not permitted". A runc wrapper drops process.rlimits from the OCI bundle; Podman
#   gets it through a containers.conf (CONTAINERS_CONF), which also makes containers that name
#   no network (kind's node-image build container) run without one.
# - its own network namespace: Podman's network backend (netavark) adds iptables rules and turns
#   on IP forwarding wherever it runs. Run in a network namespace of its own, kind's "kind"
#   network, its bridge, its rules and its port mappings live and die there; the host's network
#   namespace and the local provider's krc-* namespaces are never touched, and nothing in it can
#   reach off the host (it has loopback only). kubectl and the harness must run in it too (exec).
# - /lib/modules: kind mounts the host's /lib/modules into every node; it must exist.
# - cgroup v1: kubelet >= 1.35 refuses cgroup v1 unless failCgroupV1 is false.
# - oom_score_adj: no process here may lower it (no CAP_SYS_RESOURCE), so runc in the nodes fails
#   every pod sandbox ("can't get final child's PID from pipe: EOF") unless containerd clamps the
#   scores (restrict_oom_score_adj, as kind's entrypoint does for rootless nodes).
#   `patches` prints both as the kind config fragment a cluster needs here; `config` a whole config.
#
# Usage (root):
#   tests/support/kind_machine.sh setup            # wrapper, containers.conf, netns, /lib/modules
#   tests/support/kind_machine.sh exec -- CMD ...  # CMD in the netns with the environment set
#   tests/support/kind_machine.sh env              # the environment, as shell exports
#   tests/support/kind_machine.sh patches          # the kind config fragment this machine needs
#   tests/support/kind_machine.sh config NAME [CPU_WORKERS] [GPU_WORKERS]  # a kind config for here
#   tests/support/kind_machine.sh snapshot FILE    # host network state, to compare before/after
#   tests/support/kind_machine.sh listing          # podman containers, networks, volumes, images
#   tests/support/kind_machine.sh teardown         # undo setup (refuses while containers remain)
set -eu

NETNS=${KIND_MACHINE_NETNS:-kind-machine}
STATE=${KIND_MACHINE_STATE:-/run/kind-machine}
RUNC=${KIND_MACHINE_RUNC:-/usr/bin/runc}

die() { echo "kind_machine.sh: $*" >&2; exit 2; }

need_root() { [ "$(id -u)" = 0 ] || die "needs root (rootful podman, network namespaces)"; }

write_wrapper() {
  cat >"$STATE/runc-norlimits" <<EOF
#!/bin/sh
# runc, minus process.rlimits in the OCI bundle (create/run) and in an exec process file:
# this machine refuses raising resource limits inside containers.
prev=""
for a in "\$@"; do
  f=""
  case "\$prev" in --bundle|-b) f="\$a/config.json";; --process|-p) f="\$a";; esac
  case "\$a" in --bundle=*) f="\${a#--bundle=}/config.json";; --process=*) f="\${a#--process=}";; esac
  if [ -n "\$f" ] && [ -f "\$f" ] && jq -e '.process.rlimits // .rlimits' "\$f" >/dev/null 2>&1; then
    jq 'del(.process.rlimits) | del(.rlimits)' "\$f" >"\$f.norlimits" && mv "\$f.norlimits" "\$f"
  fi
  prev="\$a"
done
exec $RUNC "\$@"
EOF
  chmod 0755 "$STATE/runc-norlimits"
  cat >"$STATE/containers.conf" <<EOF
# Written by tests/support/kind_machine.sh (test support for this kind of machine).
[containers]
# A container that names no network gets none (kind's node-image build container).
netns = "none"
# Podman caps every container at 2048 processes; a kind node holds all its pods, and one Ray head
# alone dies of it (raylet: "Resource temporarily unavailable" creating threads). Docker has no cap.
pids_limit = 0

[engine]
runtime = "runc-norlimits"

[engine.runtimes]
runc-norlimits = ["$STATE/runc-norlimits"]
EOF
}

setup() {
  need_root
  command -v podman >/dev/null || die "podman is not installed: apt-get install -y podman"
  command -v jq >/dev/null || die "jq is not installed: apt-get install -y jq"
  [ -x "$RUNC" ] || die "$RUNC is missing: apt-get install -y runc"
  mkdir -p "$STATE"
  write_wrapper
  if [ ! -e /lib/modules ]; then
    mkdir /lib/modules
    echo "/lib/modules" >"$STATE/created-lib-modules"
  fi
  if ! ip netns list | grep -qx "$NETNS\( (id: [0-9]*)\)\?"; then
    ip netns add "$NETNS"
    echo "$NETNS" >"$STATE/created-netns"
  fi
  ip netns exec "$NETNS" ip link set lo up
  echo "kind_machine.sh: ready (netns $NETNS, $STATE/containers.conf)"
}

env_exports() {
  echo "export CONTAINERS_CONF=$STATE/containers.conf"
  echo "export KIND_EXPERIMENTAL_PROVIDER=podman"
}

run_in() {
  need_root
  [ -f "$STATE/containers.conf" ] || die "run setup first"
  [ "${1:-}" = "--" ] && shift
  [ $# -gt 0 ] || die "exec needs a command"
  # Routes to the pod ranges, kept while CMD runs: the node image's kindnet stand-in does not
  # masquerade, so answers to pods from this namespace (Podman's DNS, to which CoreDNS forwards
  # names outside the cluster, dns.podman search names included) need a way back to each node's
  # pod range. Without them every such lookup times out, and gRPC's resolver (Ray's) gives up on
  # it, so Ray workers never find their head ("Timed out while waiting for GCS").
  pod_routes &
  routes=$!
  trap 'kill $routes 2>/dev/null' EXIT INT TERM
  # nsenter --net only: the mount namespace stays the host's, so the netns files Podman bind-mounts
  # under /run/netns stay visible to every later podman call (ip netns exec would hide them).
  nsenter --net="/run/netns/$NETNS" env CONTAINERS_CONF="$STATE/containers.conf" \
    KIND_EXPERIMENTAL_PROVIDER=podman "$@"
}

pod_routes() {
  set +e  # a node not Ready yet, or gone, is tried again on the next round
  in_ns="nsenter --net=/run/netns/$NETNS env CONTAINERS_CONF=$STATE/containers.conf"
  while sleep 3; do
    for cp in $($in_ns podman ps --filter label=io.x-k8s.kind.role=control-plane --format '{{.Names}}'); do
      $in_ns podman exec "$cp" kubectl --kubeconfig=/etc/kubernetes/admin.conf get nodes -o \
        jsonpath='{range .items[*]}{.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}' \
        2>/dev/null | while read -r cidr ip; do
          [ -n "$cidr" ] && [ -n "$ip" ] && $in_ns ip route replace "$cidr" via "$ip" 2>/dev/null
        done
    done
  done
}

patches() {
  cat <<EOF
# This machine: cgroup v1 (hybrid), which kubelet >= 1.35 refuses unless failCgroupV1 is false.
kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false
# This machine: no process may lower its oom_score_adj; containerd must not ask runc to.
containerdConfigPatches:
- |-
  [plugins."io.containerd.grpc.v1.cri"]
    restrict_oom_score_adj = true
EOF
}

config() {
  name=${1:?config needs a cluster name}
  cpu=${2:-1}
  gpu=${3:-1}
  printf 'kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nname: %s\n' "$name"
  patches
  printf 'nodes:\n- role: control-plane\n'
  i=0
  while [ "$i" -lt "$cpu" ]; do
    echo "- role: worker"
    i=$((i + 1))
  done
  i=0
  while [ "$i" -lt "$gpu" ]; do
    cat <<EOF
- role: worker
  labels:
    nvidia.com/gpu.present: "true"
    kuberay-conformance.io/gpu: "true"
  kubeadmConfigPatches:
  - |
    kind: JoinConfiguration
    nodeRegistration:
      taints:
      - key: nvidia.com/gpu
        value: present
        effect: NoSchedule
EOF
    i=$((i + 1))
  done
}

snapshot() {
  out=${1:?snapshot needs a file}
  {
    echo "## host netns: FORWARD policy, ip_forward"
    iptables -S FORWARD 2>&1 | head -1
    sysctl -n net.ipv4.ip_forward net.ipv6.conf.all.forwarding
    echo "## host netns: iptables-save (counters dropped)"
    iptables-save 2>&1 | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//'
    echo "## host netns: nft list ruleset"
    nft list ruleset 2>&1
    echo "## host links"
    ip -br link | awk '{print $1}' | sort
    for ns in $(ip netns list | awk '{print $1}' | grep '^krc-' | sort); do
      echo "## netns $ns: FORWARD policy and rule count"
      ip netns exec "$ns" iptables -S FORWARD 2>&1 | head -1
      ip netns exec "$ns" iptables-save 2>/dev/null | grep -c '^-A' || true
    done
  } >"$out"
}

listing() {
  run_in sh -c 'echo "## podman ps -a"; podman ps -a; echo "## podman network ls"; podman network ls;
    echo "## podman volume ls"; podman volume ls; echo "## podman images"; podman images'
}

teardown() {
  need_root
  if [ -f "$STATE/containers.conf" ]; then
    left=$(CONTAINERS_CONF="$STATE/containers.conf" podman ps -aq | wc -l)
    [ "$left" = 0 ] || die "$left podman container(s) remain: delete the kind clusters first (kind delete cluster --name N)"
    nets=$(CONTAINERS_CONF="$STATE/containers.conf" podman network ls -q | grep -vx podman || true)
    for net in $nets; do
      nsenter --net="/run/netns/$NETNS" env CONTAINERS_CONF="$STATE/containers.conf" podman network rm "$net"
    done
  fi
  if [ -f "$STATE/created-netns" ]; then
    ip netns delete "$NETNS"
  fi
  if [ -f "$STATE/created-lib-modules" ]; then
    rmdir /lib/modules 2>/dev/null || echo "kind_machine.sh: /lib/modules is not empty, left in place" >&2
  fi
  rm -rf "$STATE"
  echo "kind_machine.sh: torn down"
}

case "${1:-}" in
  setup) setup ;;
  env) env_exports ;;
  exec) shift; run_in "$@" ;;
  config) shift; config "$@" ;;
  patches) patches ;;
  snapshot) shift; snapshot "$@" ;;
  listing) listing ;;
  teardown) teardown ;;
  *) sed -n '2,38p' "$0" >&2; exit 3 ;;
esac
