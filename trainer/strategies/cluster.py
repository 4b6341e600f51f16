"""Where this process's rank comes from: torchrun, SLURM's `srun`, or nowhere (one process).

`ClusterEnvironment.detect()` reads the environment once and says which launcher started
this process, its rank, the world size, its rank on this machine and where rank 0 listens:

- **torchrun** (or `devices=N`, which starts its ranks with torchrun's variables): `RANK`,
  `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`/`MASTER_PORT`. They win over SLURM's, so
  `srun torchrun ...` works as torchrun does;
- **SLURM**, a task started by `srun` (`SLURM_PROCID` and `SLURM_NTASKS` present): the rank
  is `SLURM_PROCID`, the world size the step's number of tasks, the local rank
  `SLURM_LOCALID`; rank 0 listens on the first host of the step's node list (SLURM's
  compressed syntax, `node[01-03,7],gpu5`, expanded here: no call to `scontrol`) at a port
  derived from the job id, `10000 + job_id % 20000`. `MASTER_ADDR` / `MASTER_PORT`, when
  set, win;
- **none**: one process. An interactive allocation (`salloc`, then `python train.py`) has
  `SLURM_NTASKS` but no `SLURM_PROCID`: it runs as one process, as does a single task.

Example:
    >>> env = ClusterEnvironment.detect({"SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1",
    ...                                  "SLURM_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "4242"})
    >>> env.kind, env.rank, env.world_size, env.main_address, env.main_port
    ('slurm', 1, 2, 'gpu07', 14242)
    >>> expand_hostlist("node[01-03,7],gpu5")
    ['node01', 'node02', 'node03', 'node7', 'gpu5']
"""

from __future__ import annotations

import datetime
import itertools
import os
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ClusterEnvironment", "expand_hostlist", "slurm_port", "slurm_job", "restart_store"]

Kind = Literal["torchrun", "slurm", "none"]

#: The first port of the range a SLURM job's port is taken from, and the range's size.
PORT_BASE, PORT_SPAN = 10000, 20000
#: Job names SLURM gives interactive allocations (`salloc`, `srun --pty bash`): never requeued.
INTERACTIVE_NAMES = ("bash", "interactive")


@dataclass(frozen=True)
class ClusterEnvironment:
    """This process's place in the job (see the module's docstring).

    Attributes:
        kind: "torchrun", "slurm" (a task `srun` started) or "none" (one process).
        rank, world_size, local_rank: this process's global rank, the number of processes and
            its rank on this machine.
        main_address, main_port: where rank 0 listens (None: torchrun's `env://` variables).
        local_world_size: the processes on this machine, when the launcher says (else None).
    """

    kind: Kind = "none"
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    main_address: str | None = None
    main_port: int | None = None
    local_world_size: int | None = None

    @classmethod
    def detect(cls, environ: Mapping[str, str] | None = None) -> ClusterEnvironment:
        """Read torchrun's variables, else SLURM's task variables, else one process.

        Raises:
            ValueError: a variable that is present but malformed (a rank that is not a number,
                a node list SLURM could not have written), naming it.
        """
        env = os.environ if environ is None else environ
        if all(name in env for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
            local_world = env.get("LOCAL_WORLD_SIZE")
            return cls(
                "torchrun", _int(env, "RANK"), _int(env, "WORLD_SIZE"), _int(env, "LOCAL_RANK"),
                local_world_size=int(local_world) if local_world and local_world.isdigit() else None,
            )
        if "SLURM_PROCID" in env and "SLURM_NTASKS" in env and "SLURM_JOB_ID" in env:
            world = _int(env, "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS")
            nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
            address = env.get("MASTER_ADDR") or (expand_hostlist(nodes)[0] if nodes else "127.0.0.1")
            return cls(
                "slurm", _int(env, "SLURM_PROCID"), world, _int(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0,
                main_address=address, main_port=slurm_port(env), local_world_size=_tasks_on_this_node(env, world),
            )
        return cls()

    @property
    def init_method(self) -> str | None:
        """What `init_process_group(init_method=...)` takes: `tcp://host:port` for SLURM,
        None (torchrun's `env://` variables) otherwise."""
        if self.main_address is None or self.main_port is None:
            return None
        host = f"[{self.main_address}]" if ":" in self.main_address else self.main_address  # an IPv6 literal
        return f"tcp://{host}:{self.main_port}"

    def describe(self) -> str:
        """`"srun (task 1 of 2)"`, `"torchrun (rank 0 of 4)"` or `"one process"`, for messages."""
        if self.kind == "slurm":
            return f"srun (task {self.rank} of {self.world_size}, rank 0 at {self.main_address}:{self.main_port})"
        if self.kind == "torchrun":
            return f"torchrun (rank {self.rank} of {self.world_size})"
        return "one process"


def slurm_port(environ: Mapping[str, str]) -> int:
    """`MASTER_PORT` when set, else `10000 + SLURM_JOB_ID % 20000` (the same on every task of
    a job, different for jobs that share a node unless their ids are 20000 apart)."""
    if environ.get("MASTER_PORT"):
        return _int(environ, "MASTER_PORT")
    job = environ.get("SLURM_JOB_ID", "")
    number = int(job) if job.isdigit() else zlib.crc32(job.encode())
    return PORT_BASE + number % PORT_SPAN


def slurm_job(environ: Mapping[str, str] | None = None) -> str | None:
    """The id of the SLURM batch job this process runs in; None outside SLURM and in an
    interactive allocation (`salloc`, `srun --pty bash`), which can't be requeued."""
    env = os.environ if environ is None else environ
    job = env.get("SLURM_JOB_ID")
    if not job or env.get("SLURM_JOB_NAME") in INTERACTIVE_NAMES:
        return None
    return job


def restart_store(timeout: datetime.timedelta | None, environ: Mapping[str, str] | None = None) -> Any:
    """The store a torchrun worker forms its process group with: torchrun's own (the agent's,
    `MASTER_ADDR:MASTER_PORT`) under a prefix naming this attempt (`TORCHELASTIC_RESTART_COUNT`);
    None when torchrun did not start this process with its agent's store (then `env://`).

    torchrun keeps one store for every attempt of a job, so after `--max-restarts` brought
    the workers back, the addresses the previous attempt's ranks published were still there,
    and a new rank could read a dead peer's address instead of its new one and fail to form
    the group ("Gloo connectFullMesh failed ... Connection refused"). A prefix per attempt
    gives each attempt keys of its own (the Trainer's stop agreements included).
    """
    env = os.environ if environ is None else environ
    if env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true" or "MASTER_ADDR" not in env:
        return None
    from torch import distributed as dist
    from torch.distributed.constants import default_pg_timeout

    store = dist.TCPStore(env["MASTER_ADDR"], _int(env, "MASTER_PORT"), is_master=False,
                          timeout=timeout or default_pg_timeout)
    return dist.PrefixStore(f"trainer/attempt-{env.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


# --------------------------------------------------------------------------- host lists
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_hostlist(hostlist: str) -> list[str]:
    """SLURM's compressed host list as host names, in order.

    Commas separate hosts outside brackets; inside, they separate numbers and ranges whose
    zero padding is kept (`node[08-10]` is node08, node09, node10). Several bracket groups
    in one name multiply (`rack[1-2]-n[1-2]`: rack1-n1, rack1-n2, rack2-n1, rack2-n2).

    Raises:
        ValueError: unbalanced brackets, an empty name, or a range that is not `a-b` with a <= b.
    """
    hosts: list[str] = []
    for name in _split_top_level(hostlist.strip()):
        hosts.extend(_expand_name(name, hostlist))
    if not hosts:
        raise ValueError(f"SLURM's node list is empty. Expected host names such as 'node[01-04],gpu7'. Received: {hostlist!r}.")
    return hosts


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += (char == "[") - (char == "]")
        if depth < 0 or depth > 1:
            raise ValueError(f"SLURM's node list has unbalanced or nested brackets. Expected 'name[1-3,7]'. Received: {text!r}.")
        if char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    if depth:
        raise ValueError(f"SLURM's node list has an unclosed '['. Expected 'name[1-3,7]'. Received: {text!r}.")
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def _expand_name(name: str, whole: str) -> list[str]:
    pieces = re.split(r"\[([^\]]*)\]", name)  # text, group, text, group, ..., text
    choices: list[list[str]] = []
    for index, piece in enumerate(pieces):
        choices.append(_expand_group(piece, whole) if index % 2 else [piece])
    return ["".join(parts) for parts in itertools.product(*choices)]


def _expand_group(group: str, whole: str) -> list[str]:
    out: list[str] = []
    for item in group.split(","):
        match = _RANGE.match(item.strip())
        if match is None or (match.group(2) is not None and int(match.group(2)) < int(match.group(1))):
            raise ValueError(
                f"SLURM's node list has a bad range {item!r} in [{group}]. Expected numbers or ranges "
                f"such as [01-03,7]. Received: {whole!r}."
            )
        first, last = match.group(1), match.group(2) or match.group(1)
        out.extend(str(number).zfill(len(first)) for number in range(int(first), int(last) + 1))
    return out


# ------------------------------------------------------------------------------ helpers
def _int(environ: Mapping[str, str], name: str) -> int:
    value = environ[name]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"The environment variable {name} must be an integer. Received: {value!r}.") from None


def _tasks_on_this_node(environ: Mapping[str, str], world: int) -> int | None:
    """SLURM's tasks on this node: `SLURM_NTASKS_PER_NODE`, else this node's entry of
    `SLURM_STEP_TASKS_PER_NODE` / `SLURM_TASKS_PER_NODE` (`"2(x3),1"`), else None."""
    per_node = environ.get("SLURM_NTASKS_PER_NODE", "")
    if per_node.isdigit():
        return int(per_node)
    layout = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE")
    node = environ.get("SLURM_NODEID", "0")
    if not layout or not node.isdigit():
        return world if environ.get("SLURM_NNODES", environ.get("SLURM_JOB_NUM_NODES")) == "1" else None
    counts: list[int] = []
    for entry in layout.split(","):
        match = re.match(r"^(\d+)(?:\(x(\d+)\))?$", entry.strip())
        if match is None:
            return None
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts[int(node)] if int(node) < len(counts) else None
