"""Container CLIs (``docker``, ``podman``, ``nerdctl``): which subcommand runs, with which options.

A container started with a host directory, host namespaces or extra privileges gets around every
other rule, so the guards read these command lines closely: :func:`read_container` splits the
CLI's global options, the (management) subcommand and every option of it, in each spelling the
CLIs accept (``-v SRC:DST``, ``-vSRC:DST``, ``-itv SRC:DST``, ``-v=SRC:DST``, ``--volume SRC:DST``,
``--volume=SRC:DST``, ``--mount type=bind,...``).  Options after the image are read too (they are
the container's command's own, but reading them costs only false alarms, never a miss).

The analysis (:func:`container_program`, a program handler) records as opaque what it cannot see
into: ``compose``/``stack deploy``/``kube play``/``buildx bake`` (they read a file the agent may
have written), ``exec``/``attach``/``debug`` into a container the loop did not start, a CLI
configuration or runtime named on the command line.  What the mounts and flags of ``run``/``create``
may do is the guards' rule (``privilege``), which needs the project's paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ralph.shell.walker import Call, Walker

CONTAINER_CLIS = frozenset({"docker", "podman", "nerdctl", "finch", "buildah"})
"""CLIs that start containers and take docker's options (buildah's ``run``/``from`` take its mount options)."""
OTHER_RUNTIMES = frozenset(
    {"ctr", "crictl", "runc", "crun", "runsc", "youki", "lxc", "lxc-execute", "lxc-start", "lxc-attach", "lxc-create",
     "incus", "systemd-nspawn", "apptainer", "singularity", "kubectl", "oc", "minikube", "kind", "k3d", "k3s",
     "microk8s", "lima", "limactl", "colima", "vagrant", "virsh", "virt-install", "qemu-system-x86_64",
     "qemu-system-aarch64", "qemu-kvm", "firecracker", "multipass", "toolbox", "distrobox", "distrobox-create",
     "containerd", "dockerd", "machinectl", "charliecloud", "ch-run", "udocker"})
"""Other container and VM runners: what they mount, share or run is not modelled (opaque in direct mode, except
the read-only commands of ``kubectl``/``oc``)."""
_KUBECTL_READS = frozenset({"get", "describe", "logs", "explain", "version", "api-resources", "api-versions",
                            "cluster-info", "top", "config", "diff", "events", "wait", "auth"})
COMPOSE_CLIS = frozenset({"docker-compose", "podman-compose", "nerdctl-compose"})

_MANAGEMENT = frozenset({"container", "image", "volume", "network", "service", "stack", "compose", "buildx",
                         "builder", "plugin", "system", "swarm", "context", "trust", "manifest", "pod", "kube",
                         "machine", "secret", "config", "node", "checkpoint", "namespace", "ipfs", "apparmor", "play"})
_GLOBAL_VALUES = frozenset({"-H", "--host", "-c", "--context", "-l", "--log-level", "--tlscacert", "--tlscert",
                            "--tlskey", "--connection", "--url", "--identity", "--namespace", "-n", "--address",
                            "-a"})
"""Global options that take a value and change nothing a container can reach."""
_GLOBAL_FLAGS = frozenset({"-D", "--debug", "--tls", "--tlsverify", "--remote", "-r", "--help", "-h", "--version",
                           "-v"})
_SHORT_VALUES = {"run": "acehlmpuvw", "create": "acehlmpuvw", "build": "fotv", "bud": "fotv", "from": "v",
                 "volume create": "do", "service create": "elpuw", "pod create": "lnpv", "pod clone": "lnpv"}
"""Per subcommand, its short options that take a value (``-v``, ``-e``, ``-p`` ...); the others are flags."""
_LONG_VALUES = frozenset(
    """--add-host --annotation --attach --blkio-weight --blkio-weight-device --cap-add --cap-drop --cgroup-parent
    --cgroupns --cidfile --cpu-count --cpu-percent --cpu-period --cpu-quota --cpu-rt-period --cpu-rt-runtime
    --cpu-shares --cpus --cpuset-cpus --cpuset-mems --detach-keys --device --device-cgroup-rule
    --device-read-bps --device-read-iops --device-write-bps --device-write-iops --dns --dns-option --dns-search
    --domainname --entrypoint --env --env-file --expose --gpus --group-add --health-cmd --health-interval
    --health-retries --health-start-interval --health-start-period --health-timeout --hostname --io-maxbandwidth
    --io-maxiops --ip --ip6 --ipc --isolation --kernel-memory --label --label-file --link --link-local-ip
    --log-driver --log-opt --mac-address --memory --memory-reservation --memory-swap --memory-swappiness --mount
    --name --network --net --network-alias --net-alias --oom-score-adj --pid --pids-limit --platform --publish
    --pull --restart --runtime --security-opt --shm-size --stop-signal --stop-timeout --storage-opt --sysctl
    --tmpfs --ulimit --user --userns --uts --volume --volume-driver --volumes-from --workdir --rootfs --pod
    --secret --hooks-dir --opt --driver --output --allow --build-context --build-arg --file --tag --target
    --cache-from --cache-to --progress --ssh --arch --os --variant --uidmap --gidmap --subuidname --subgidname
    --chrootdirs --init-path --seccomp-policy --personality --preserve-fds --sdnotify --timeout --requires
    --infra-command --infra-image --share --cgroups --conmon-pidfile --pidfile --image-volume --decryption-key
    --passwd-entry --group-entry --umask --mode --replicas --constraint --config --network-alias --mount-add
    --mount-rm --cap-drop --network-add --network-rm --host-add --generic-resource-add --env-add --label-add
    --publish-add --dns-add --group-add --build-context --runtime-flag""".split()
)
"""Long options that take a value (as the next word when not given with ``=``)."""


@dataclass
class ContainerCall:
    """A container CLI's command line, read."""

    cli: str
    sub: list[str]
    """The subcommand: ``["run"]``, ``["container", "run"]``, ``["volume", "create"]`` ... (empty: none)."""
    options: list[tuple[str, str, bool]] = field(default_factory=list)
    """Every option after the subcommand: (name, value or "", value only known at run time)."""
    operands: list[tuple[str, bool]] = field(default_factory=list)
    """The words that are no option: (text, only known at run time)."""
    global_options: list[str] = field(default_factory=list)
    """Global options the reading does not know (a CLI config, a runtime, hooks ...)."""

    @property
    def action(self) -> str:
        """The subcommand without its management group: ``container run`` -> ``run``."""
        if len(self.sub) == 2 and self.sub[0] in ("container", "image", "builder"):
            return self.sub[1]
        return " ".join(self.sub)

    def values(self, *names: str) -> list[tuple[str, bool]]:
        """The values given to any of ``names`` (``--volume`` and ``-v`` ...)."""
        return [(value, dynamic) for name, value, dynamic in self.options if name in names]

    def has(self, *names: str) -> bool:
        return any(name in names for name, _, _ in self.options)


def read_container(argv: list[str], dynamic: list[bool]) -> ContainerCall:
    """Read a ``docker``/``podman``/``nerdctl`` argv (``argv[0]`` is the CLI)."""
    call = ContainerCall(argv[0].rsplit("/", 1)[-1], [])
    i = 1
    while i < len(argv) and argv[i].startswith("-") and not dynamic[i]:
        key, eq, _ = argv[i].partition("=")
        if key in _GLOBAL_VALUES and not eq:
            i += 2
            continue
        if key not in _GLOBAL_VALUES and key not in _GLOBAL_FLAGS:
            call.global_options.append(argv[i])
        i += 1
    if i < len(argv):
        call.sub.append(argv[i])
        i += 1
        if call.sub[0] in _MANAGEMENT and i < len(argv) and not argv[i].startswith("-"):
            call.sub.append(argv[i])
            i += 1
    shorts = _SHORT_VALUES.get(call.action, "acehlmpuvw")
    while i < len(argv):
        text, dyn = argv[i], dynamic[i]
        i += 1
        if dyn or not text.startswith("-") or text == "-":
            call.operands.append((text, dyn))
            continue
        if text == "--":
            call.operands.extend(zip(argv[i:], dynamic[i:]))
            break
        if text.startswith("--"):
            key, eq, value = text.partition("=")
            if not eq and key in _LONG_VALUES and i < len(argv):
                value, dyn = argv[i], dynamic[i]
                i += 1
            call.options.append((key, value, dyn))
            continue
        for j in range(1, len(text)):  # a cluster of short options: `-itv /:/h`, `-v/:/h`, `-v=/:/h`
            letter = text[j]
            if letter in shorts:
                rest = text[j + 1 :]
                if rest:
                    call.options.append(("-" + letter, rest[1:] if rest.startswith("=") else rest, False))
                elif i < len(argv):
                    call.options.append(("-" + letter, argv[i], dynamic[i]))
                    i += 1
                else:
                    call.options.append(("-" + letter, "", False))
                break
            call.options.append(("-" + letter, "", False))
    return call


def mount_fields(value: str) -> dict[str, str]:
    """The fields of a ``--mount`` value (CSV, as the CLIs read it: ``type=bind,"source=/x",target=/y``)."""
    import csv

    try:
        row = next(csv.reader([value]), [])
    except csv.Error:
        row = value.split(",")
    fields: dict[str, str] = {}
    for part in row:
        key, eq, val = part.partition("=")
        key = key.strip().lower()
        if key in ("volume-opt", "opt"):  # `volume-opt=device=/`: keep each option as its own field
            sub, _, subval = val.partition("=")
            fields[f"volume-opt:{sub.strip().lower()}"] = subval
        elif key == "type":  # the CLIs lower-case the type (`type=BIND` is a bind mount)
            fields[key] = val.strip().lower()
        else:
            fields[key] = val if eq else "true"
    return fields


_OPAQUE_ACTIONS = {
    "compose": "reads a compose file the agent may have written",
    "stack deploy": "reads a compose file the agent may have written",
    "stack up": "reads a compose file the agent may have written",
    "kube play": "reads a Kubernetes file the agent may have written",
    "play kube": "reads a Kubernetes file the agent may have written",
    "buildx bake": "reads a bake file the agent may have written",
    "exec": "runs a command in a container the loop did not start",
    "attach": "attaches to a container the loop did not start",
    "debug": "runs a shell in a container the loop did not start",
    "machine ssh": "runs a command in a virtual machine",
    "start": "starts a container the loop did not create, with whatever mounts and privileges it was given",
    "restart": "starts a container the loop did not create, with whatever mounts and privileges it was given",
    "unpause": "resumes a container the loop did not start",
    "context": "switches the engine the CLI talks to (another host's, a root one)",
    "login": "stores registry credentials in the user's configuration",
    "app": "runs a plugin that reads an application file the agent may have written",
}
KNOWN_SUBCOMMANDS = frozenset(
    """attach build builder buildx checkpoint commit compose config container context cp create diff events exec
    export history image images import info inspect kill load login logout logs manifest network node pause plugin
    port ps pull push rename restart rm rmi run save search secret service stack start stats stop swarm system tag
    top trust unpause update version volume wait init scout sbom debug pod kube machine generate play healthcheck
    mount umount unmount unshare untag auto-update farm artifact from bud commit containers copy add config
    rename mkcm manifest source namespace ipfs apparmor builder compose events login""".split())
"""Subcommands of the container CLIs the analysis reads (any other is a plugin program: opaque)."""


_COMPOSE_READS = frozenset({"ps", "logs", "ls", "config", "images", "top", "version", "port", "events"})
"""Compose subcommands that start, build or change nothing (they read the file to find the project)."""
_COMPOSE_GLOBAL_VALUES = frozenset({"-f", "--file", "-p", "--project-name", "--project-directory", "--env-file",
                                    "--profile", "--ansi", "--parallel", "--progress"})


def _compose_reads(args: list[str], dynamic: list[bool]) -> bool:
    """Is this compose command line (after ``compose``) one that only reads (``ps``, ``logs`` ...)?"""
    i = 0
    while i < len(args) and args[i].startswith("-") and not dynamic[i]:
        i += 1 if "=" in args[i] or args[i] not in _COMPOSE_GLOBAL_VALUES else 2
    return i < len(args) and not dynamic[i] and args[i] in _COMPOSE_READS


def other_runtime(w: Walker, call: Call) -> None:
    """``ctr``, ``kubectl``, ``apptainer``, ``lxc``, ``systemd-nspawn``, VMs ...: opaque (read-only kubectl aside)."""
    from ralph.shell.progutil import emit

    emit(w, call)
    name = call.name
    words = [x.text for x in call.words[1:]]
    if name in ("kubectl", "oc"):
        sub = next((x for x in words if not x.startswith("-")), "")
        if sub in _KUBECTL_READS and not (sub == "config" and any(x in words for x in ("set", "set-context",
                                                                                       "use-context", "set-cluster",
                                                                                       "set-credentials"))):
            return
    w.opaque(f"`{name}` runs containers, pods or machines with mounts and privileges the guard does not model",
             "use docker or podman with literal options, or leave it to the user")


def container_program(w: Walker, call: Call) -> None:
    """The analysis's handler for a container CLI: opaque findings for what it cannot see into."""
    from ralph.shell.progutil import emit, inner

    emit(w, call)
    cmd = call.cmd
    name = cmd.name
    if name in COMPOSE_CLIS:
        if not _compose_reads(cmd.argv[1:], cmd.dynamic[1:]):
            w.opaque(f"`{name}` reads a compose file the agent may have written",
                     "start containers with `docker run` and literal options")
        return
    view = read_container(cmd.argv, cmd.dynamic)
    if view.global_options:
        w.opaque(f"`{name} {view.global_options[0]}` configures the container CLI in a way the guard does not "
                 "model", f"run `{name}` without it")
    action = view.action
    sub_at = next((k for k, word in enumerate(call.words) if k and word.text == (view.sub or [""])[0]), None)
    if view.sub and sub_at is not None and call.words[sub_at].dynamic:
        w.opaque(f"`{name} {view.sub[0]}`: the subcommand is only known at run time", "name the subcommand literally")
    if action in ("run", "create") and any(dynamic for _, dynamic in view.operands):
        w.opaque(f"`{name} {action}` with a word only known at run time (it could be any option: a mount, "
                 "--privileged)", "write the image and the options literally")
    if action == "unshare":  # `podman unshare CMD`, `buildah unshare CMD`: CMD runs here, as you
        at = next((k for k, word in enumerate(call.words) if word.text == "unshare" and k > 0), len(call.words))
        inner(w, call, at + 1)
    if view.sub and view.sub[0] not in KNOWN_SUBCOMMANDS and not view.sub[0].startswith("-"):
        w.opaque(f"`{name} {view.sub[0]}` is not a {name} command the guard knows (a CLI plugin runs a program of "
                 "its own)", f"use the {name} commands the guard reads (run, build, ps ...)")
    why = _OPAQUE_ACTIONS.get(action) or _OPAQUE_ACTIONS.get(view.sub[0] if view.sub else "")
    if action in ("context ls", "context list", "context inspect", "context show"):
        why = None
    if view.sub[:1] == ["compose"]:
        at = next((k for k, word in enumerate(call.words) if k and word.text == "compose"), len(call.words))
        if _compose_reads(cmd.argv[at + 1 :], cmd.dynamic[at + 1 :]):
            why = None
    if why:
        w.opaque(f"`{name} {action}` {why}", "run the commands in the project directly")
