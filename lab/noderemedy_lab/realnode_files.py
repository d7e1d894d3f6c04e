"""Files the lab writes into each real node: the runc wrapper, the FC port hook and containerd's
configuration (templates filled by :class:`noderemedy_lab.realnode.RealNodes`)."""

from __future__ import annotations

#: containerd's runc ``BinaryName``. The machine gives no CAP_SYS_RESOURCE, so runc cannot write
#: the negative ``oom_score_adj`` kubelet asks for every pod sandbox (-998) and every Guaranteed
#: container; runc then fails with only "can't get final child's PID from pipe: EOF" (crun names
#: the cause: "write to /proc/self/oom_score_adj: Permission denied"). On ``create`` the wrapper
#: clamps ``process.oomScoreAdj`` in the bundle's config.json to >= 0, then execs runc with the
#: same arguments. Lab reference, real node, item 1.
RUNC_WRAPPER = """#!{python} -IS
# runc wrapper of the noderemedy lab (see noderemedy_lab.realnode_files.RUNC_WRAPPER): clamp a negative
# process.oomScoreAdj to 0 on "create", then exec runc.
import json, os, sys
args = sys.argv[1:]
if "create" in args:
    bundle = "."
    for i, a in enumerate(args):
        if a in ("--bundle", "-b") and i + 1 < len(args):
            bundle = args[i + 1]
        elif a.startswith("--bundle="):
            bundle = a.split("=", 1)[1]
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        spec = json.load(f)
    proc = spec.get("process") or {{}}
    if proc.get("oomScoreAdj", 0) < 0:
        proc["oomScoreAdj"] = 0
        with open(path + ".tmp", "w") as f:
            json.dump(spec, f)
        os.replace(path + ".tmp", path)
os.execv({runc!r}, [{runc!r}] + args)
"""


#: The FC switch's port hook of a real node (``fc-hook.sh up|down``, run by the switch backend,
#: data/fence_pass.py). The port stands for the node's HBA: down unmounts the shared storage from
#: the node's mount namespace (lazily: a file a process holds open stays usable through its
#: descriptor, unlike on a real fabric; the lab's writers open the file for each line), and the
#: unmount propagates into every pod that mounts it with HostToContainer propagation, where the
#: read-only tmpfs underneath then fails every write with EROFS. Up mounts it again (propagating
#: into the pods). The state is kept in ``fc-port`` for a node that is off and boots later.
FC_HOOK = """#!/bin/sh
# FC port hook of one lab real node (written by noderemedy_lab.realnode): $1 = up | down
case "$1" in up|down) ;; *) echo "usage: $0 up|down" >&2; exit 2 ;; esac
echo "$1" > "{state}"
pid=$(cat "{pid_file}" 2>/dev/null) || exit 0
[ -e "/proc/$pid/ns/mnt" ] || exit 0
if [ "$1" = down ]; then
    exec nsenter --mount="/proc/$pid/ns/mnt" -- sh -c 'while mountpoint -q "{data}"; do umount -l "{data}" || exit 1; done'
fi
exec nsenter --mount="/proc/$pid/ns/mnt" -- sh -c 'mountpoint -q "{data}" || mount --bind "{shared}" "{data}"'
"""


CONTAINERD_CONFIG = """# containerd of one lab real node (written by noderemedy_lab.realnode)
version = 2
root = "{root}"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{socket}"

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{wrapper}"
        SystemdCgroup = false
"""
